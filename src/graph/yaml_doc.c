#include "yaml_doc.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* Nodes and strings live in one arena so freeing a document is O(chunks)
 * and parsing a 100,000-rank plan does not pay one malloc per scalar. */
struct arena_chunk {
  struct arena_chunk *next;
  size_t used, cap;
  max_align_t data[];
};

_Static_assert(sizeof(struct ydoc_node) == 16, "a node per two input bytes must stay small");

#define ARENA_CHUNK ((size_t)64 << 10)
/* Maps up to this size are checked for duplicate keys pairwise; larger ones
 * are sorted, so a hostile map costs O(n log n), not O(n^2). */
#define SMALL_MAP 16

/* Children are collected on a growable stack while a collection is open,
 * then copied into the arena when it closes. */
struct build_frame {
  struct ydoc_node *node;
  size_t first;  /* index into the item stack */
};

struct builder {
  struct ydoc *doc;
  struct ydoc_node **items;
  size_t nitems, capitems;
  struct build_frame frames[YDOC_MAX_DEPTH + 1];
  int depth, ndocs;
  size_t nnodes;
  size_t mem, mem_max;  /* bytes held by arena chunks and the item stack */
  char *err;
  size_t errlen;
};

/* One line whatever the file holds: values and keys echoed from it may
 * carry line breaks (a multi-line plain scalar, a key with CRs) or control
 * bytes; they become '?'. */
static void one_line(char *err) {
  for (char *c = err; *c != '\0'; c++)
    if ((unsigned char)*c < 0x20 || (unsigned char)*c == 0x7f) *c = '?';
}

static int fail(struct builder *b, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(struct builder *b, int line, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (b->err && b->errlen) {
    snprintf(b->err, b->errlen, "%s:%d: %s", b->doc->what, line, msg);
    one_line(b->err);
  }
  return -1;
}

/* Every allocation asks first, so a hostile file is refused before the
 * allocation that would take memory out of proportion to its size. */
static int reserve(struct builder *b, size_t n, int line) {
  if (n <= b->mem_max && b->mem <= b->mem_max - n) return 0;
  return fail(b, line, "document needs more than %zu MiB of memory to load (%d bytes per "
              "byte of input plus %zu MiB)", b->mem_max >> 20, YDOC_MEM_PER_BYTE,
              YDOC_MEM_SLACK >> 20);
}

static void *arena_alloc(struct builder *b, size_t n, size_t align, int line) {
  struct arena_chunk *c = b->doc->arena;
  size_t at = c ? (c->used + align - 1) & ~(align - 1) : 0;
  if (c == NULL || at > c->cap || c->cap - at < n) {
    size_t cap = n > ARENA_CHUNK ? n : ARENA_CHUNK;
    if (reserve(b, sizeof(*c) + cap, line)) return NULL;
    struct arena_chunk *nc = malloc(sizeof(*nc) + cap);
    if (nc == NULL) {
      fail(b, line, "out of memory");
      return NULL;
    }
    b->mem += sizeof(*nc) + cap;
    nc->next = c;
    nc->used = 0;
    nc->cap = cap;
    b->doc->arena = c = nc;
    at = 0;
  }
  c->used = at + n;
  return (char *)c->data + at;
}

void gcoll_ydoc_free(struct ydoc *doc) {
  struct arena_chunk *c = doc->arena;
  while (c) {
    struct arena_chunk *next = c->next;
    free(c);
    c = next;
  }
  doc->arena = NULL;
  doc->root = NULL;
}

static int push_item(struct builder *b, struct ydoc_node *n) {
  if (b->nitems == b->capitems) {
    size_t cap = b->capitems ? b->capitems * 2 : 256;
    if (reserve(b, (cap - b->capitems) * sizeof(*b->items), (int)n->line)) return -1;
    struct ydoc_node **p = realloc(b->items, cap * sizeof(*p));
    if (p == NULL) return fail(b, (int)n->line, "out of memory");
    b->mem += (cap - b->capitems) * sizeof(*p);
    b->items = p;
    b->capitems = cap;
  }
  b->items[b->nitems++] = n;
  return 0;
}

/* Adds a finished node to its parent (or makes it the root). */
static int attach(struct builder *b, struct ydoc_node *n) {
  if (b->depth == 0) {
    b->doc->root = n;
    return 0;
  }
  return push_item(b, n);
}

static const char *event_anchor(const yaml_event_t *ev) {
  switch (ev->type) {
    case YAML_SCALAR_EVENT: return (const char *)ev->data.scalar.anchor;
    case YAML_SEQUENCE_START_EVENT: return (const char *)ev->data.sequence_start.anchor;
    case YAML_MAPPING_START_EVENT: return (const char *)ev->data.mapping_start.anchor;
    default: return NULL;
  }
}

/* One- and zero-character values (most list items in a dense file) share
 * static strings instead of taking arena space. */
#define TINY1(c) {(char)(c), 0}
#define TINY4(c) TINY1(c), TINY1((c) + 1), TINY1((c) + 2), TINY1((c) + 3)
#define TINY16(c) TINY4(c), TINY4((c) + 4), TINY4((c) + 8), TINY4((c) + 12)
#define TINY64(c) TINY16(c), TINY16((c) + 16), TINY16((c) + 32), TINY16((c) + 48)
static const char tiny_strings[256][2] = {TINY64(0), TINY64(64), TINY64(128), TINY64(192)};

static const char *tiny_string(const unsigned char *v, size_t len) {
  if (len == 0) return "";
  return len == 1 ? tiny_strings[v[0]] : NULL;
}

static int fill_scalar(struct builder *b, struct ydoc_node *n, const yaml_event_t *ev) {
  const unsigned char *v = ev->data.scalar.value;
  size_t sl = ev->data.scalar.length;
  if (sl > YDOC_MAX_SCALAR)
    return fail(b, (int)n->line, "value longer than %d bytes", YDOC_MAX_SCALAR);
  if (memchr(v, '\0', sl) != NULL) return fail(b, (int)n->line, "NUL byte inside a value");
  n->kind = YDOC_SCALAR;
  n->len = (uint32_t)sl;
  n->scalar = tiny_string(v, sl);
  if (n->scalar != NULL) return 0;
  char *s = arena_alloc(b, sl + 1, 1, (int)n->line);
  if (s == NULL) return -1;
  memcpy(s, v, sl);
  s[sl] = '\0';
  n->scalar = s;
  return 0;
}

static int open_collection(struct builder *b, struct ydoc_node *n, enum ydoc_kind kind) {
  if (b->depth >= YDOC_MAX_DEPTH)
    return fail(b, (int)n->line, "nesting deeper than %d levels", YDOC_MAX_DEPTH);
  n->kind = kind;
  b->depth++;
  b->frames[b->depth].node = n;
  b->frames[b->depth].first = b->nitems;
  return 0;
}

static int on_node_start(struct builder *b, const yaml_event_t *ev, int line) {
  if (event_anchor(ev) != NULL) return fail(b, line, "YAML anchors are not allowed");
  if (++b->nnodes > YDOC_MAX_NODES)
    return fail(b, line, "document too large (more than %u nodes)", YDOC_MAX_NODES);
  struct ydoc_node *n = arena_alloc(b, sizeof(*n), alignof(struct ydoc_node), line);
  if (n == NULL) return -1;
  memset(n, 0, sizeof(*n));
  n->line = line < (1 << 30) ? (unsigned)line : (1u << 30) - 1; /* 30-bit field */
  if (ev->type == YAML_SCALAR_EVENT) return fill_scalar(b, n, ev) || attach(b, n) ? -1 : 0;
  return open_collection(b, n, ev->type == YAML_SEQUENCE_START_EVENT ? YDOC_SEQ : YDOC_MAP);
}

static int dup_key(struct builder *b, const struct ydoc_node *k) {
  return fail(b, (int)k->line, "field '%s' appears twice", k->scalar);
}

static int small_map_dups(struct builder *b, const struct ydoc_node *map) {
  for (size_t i = 1; i < map->len; i++)
    for (size_t j = 0; j < i; j++)
      if (strcmp(map->items[2 * j]->scalar, map->items[2 * i]->scalar) == 0)
        return dup_key(b, map->items[2 * i]);
  return 0;
}

/* Orders pointers into a map's item array by key, then by position, so the
 * first of equal keys comes first. */
static int key_slot_cmp(const void *pa, const void *pb) {
  struct ydoc_node *const *a = *(struct ydoc_node *const *const *)pa;
  struct ydoc_node *const *b = *(struct ydoc_node *const *const *)pb;
  int c = strcmp((*a)->scalar, (*b)->scalar);
  return c ? c : (a > b) - (a < b);
}

/* Reports the same key as the pairwise check would: the earliest entry
 * whose key appeared before it. */
static int large_map_dups(struct builder *b, const struct ydoc_node *map) {
  size_t n = map->len;
  if (reserve(b, n * sizeof(void *), (int)map->line)) return -1;
  struct ydoc_node *const **slots = malloc(n * sizeof(*slots));
  if (slots == NULL) return fail(b, (int)map->line, "out of memory");
  for (size_t i = 0; i < n; i++) slots[i] = &map->items[2 * i];
  qsort(slots, n, sizeof(*slots), key_slot_cmp);
  struct ydoc_node *const *first_dup = NULL;
  for (size_t i = 1; i < n; i++)
    if (strcmp((*slots[i - 1])->scalar, (*slots[i])->scalar) == 0 &&
        (first_dup == NULL || slots[i] < first_dup))
      first_dup = slots[i];
  free(slots);
  return first_dup ? dup_key(b, *first_dup) : 0;
}

static int check_map_keys(struct builder *b, const struct ydoc_node *map) {
  for (size_t i = 0; i < map->len; i++)
    if (map->items[2 * i]->kind != YDOC_SCALAR)
      return fail(b, (int)map->items[2 * i]->line, "mapping keys must be plain values");
  return map->len <= SMALL_MAP ? small_map_dups(b, map) : large_map_dups(b, map);
}

static int on_collection_end(struct builder *b, int line) {
  struct build_frame *f = &b->frames[b->depth];
  struct ydoc_node *n = f->node;
  size_t cnt = b->nitems - f->first;
  if (cnt) {
    n->items = arena_alloc(b, cnt * sizeof(*n->items), alignof(struct ydoc_node *), line);
    if (n->items == NULL) return -1;
    memcpy(n->items, b->items + f->first, cnt * sizeof(*n->items));
  }
  n->len = (uint32_t)(n->kind == YDOC_MAP ? cnt / 2 : cnt);
  if (n->kind == YDOC_MAP && check_map_keys(b, n)) return -1;
  b->nitems = f->first;
  b->depth--;
  return attach(b, n);
}

/* Returns 1 at the end of the stream, 0 to go on, -1 on error. */
static int on_event(struct builder *b, const yaml_event_t *ev) {
  int line = (int)ev->start_mark.line + 1;
  switch (ev->type) {
    case YAML_STREAM_END_EVENT:
      return 1;
    case YAML_DOCUMENT_START_EVENT:
      return ++b->ndocs > 1 ? fail(b, line, "more than one YAML document") : 0;
    case YAML_ALIAS_EVENT:
      return fail(b, line, "YAML aliases are not allowed");
    case YAML_SCALAR_EVENT:
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT:
      return on_node_start(b, ev, line);
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
      return on_collection_end(b, line);
    default:
      return 0;
  }
}

static int run_parser(struct builder *b, yaml_parser_t *parser) {
  for (;;) {
    yaml_event_t ev;
    if (!yaml_parser_parse(parser, &ev))
      return fail(b, (int)parser->problem_mark.line + 1, "malformed YAML: %s",
                  parser->problem ? parser->problem : "parse error");
    int rc = on_event(b, &ev);
    yaml_event_delete(&ev);
    if (rc != 0) return rc < 0 ? -1 : 0;
  }
}

int gcoll_ydoc_parse(struct ydoc *doc, const char *buf, size_t len, const char *what,
                     char *err, size_t errlen) {
  yaml_parser_t parser;
  struct builder b;
  memset(doc, 0, sizeof(*doc));
  memset(&b, 0, sizeof(b));
  doc->what = what ? what : "<input>";
  b.doc = doc;
  b.err = err;
  b.errlen = errlen;
  b.mem_max = len > (SIZE_MAX - YDOC_MEM_SLACK) / YDOC_MEM_PER_BYTE
                  ? SIZE_MAX
                  : len * YDOC_MEM_PER_BYTE + YDOC_MEM_SLACK;
  if (!yaml_parser_initialize(&parser)) return fail(&b, 0, "cannot initialise the YAML parser");
  yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
  int rc = run_parser(&b, &parser);
  yaml_parser_delete(&parser);
  free(b.items);
  if (rc != 0) gcoll_ydoc_free(doc);
  return rc;
}

/* Linear per lookup: readers look up a fixed set of fields, and refuse
 * maps with unknown keys, so a huge map costs one pass, not one per key. */
const struct ydoc_node *gcoll_ydoc_get(const struct ydoc_node *map, const char *key) {
  if (map == NULL || map->kind != YDOC_MAP) return NULL;
  for (size_t i = 0; i < map->len; i++)
    if (strcmp(map->items[2 * i]->scalar, key) == 0) return map->items[2 * i + 1];
  return NULL;
}

size_t gcoll_ydoc_count(const struct ydoc_node *n) {
  return n && n->kind != YDOC_SCALAR ? n->len : 0;
}

const struct ydoc_node *gcoll_ydoc_item(const struct ydoc_node *seq, size_t i) {
  return seq && seq->kind == YDOC_SEQ && i < seq->len ? seq->items[i] : NULL;
}

const char *gcoll_ydoc_key(const struct ydoc_node *map, size_t i) {
  return map && map->kind == YDOC_MAP && i < map->len ? map->items[2 * i]->scalar : NULL;
}

const struct ydoc_node *gcoll_ydoc_value(const struct ydoc_node *map, size_t i) {
  return map && map->kind == YDOC_MAP && i < map->len ? map->items[2 * i + 1] : NULL;
}

int gcoll_ydoc_error(const struct ydoc *doc, const struct ydoc_node *n, const char *field,
                     char *err, size_t errlen, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (err && errlen) {
    if (field)
      snprintf(err, errlen, "%s:%d: field '%s': %s", doc->what, n ? n->line : 0, field, msg);
    else
      snprintf(err, errlen, "%s:%d: %s", doc->what, n ? n->line : 0, msg);
    one_line(err);
  }
  return -1;
}

static const char *kind_name(enum ydoc_kind k) {
  return k == YDOC_SCALAR ? "a value" : k == YDOC_SEQ ? "a list" : "a mapping";
}

int gcoll_ydoc_expect(const struct ydoc *doc, const struct ydoc_node *n, enum ydoc_kind kind,
                      const char *field, char *err, size_t errlen) {
  if (n == NULL) return gcoll_ydoc_error(doc, NULL, field, err, errlen, "missing");
  if (n->kind != kind)
    return gcoll_ydoc_error(doc, n, field, err, errlen, "expected %s, found %s", kind_name(kind),
                            kind_name(n->kind));
  return 0;
}

int gcoll_ydoc_req(const struct ydoc *doc, const struct ydoc_node *map, const char *field,
                   const struct ydoc_node **out, char *err, size_t errlen) {
  if (map == NULL || map->kind != YDOC_MAP)
    return gcoll_ydoc_error(doc, map, field, err, errlen, "expected a mapping around it");
  *out = gcoll_ydoc_get(map, field);
  if (*out == NULL) return gcoll_ydoc_error(doc, map, field, err, errlen, "missing");
  return 0;
}

int gcoll_ydoc_int(const struct ydoc *doc, const struct ydoc_node *n, const char *field,
                   int64_t min, int64_t max, int64_t *out, char *err, size_t errlen) {
  if (gcoll_ydoc_expect(doc, n, YDOC_SCALAR, field, err, errlen)) return -1;
  const char *s = n->scalar;
  char *end;
  errno = 0;
  if (*s == '\0' || (*s != '-' && (*s < '0' || *s > '9')))
    return gcoll_ydoc_error(doc, n, field, err, errlen, "expected an integer, found '%.40s'", s);
  long long v = strtoll(s, &end, 10);
  if (*end != '\0')
    return gcoll_ydoc_error(doc, n, field, err, errlen, "expected an integer, found '%.40s'", s);
  if (errno == ERANGE || v < min || v > max)
    return gcoll_ydoc_error(doc, n, field, err, errlen, "%.40s is out of range [%lld, %lld]", s,
                            (long long)min, (long long)max);
  *out = v;
  return 0;
}

int gcoll_ydoc_double(const struct ydoc *doc, const struct ydoc_node *n, const char *field,
                      double min, double max, double *out, char *err, size_t errlen) {
  if (gcoll_ydoc_expect(doc, n, YDOC_SCALAR, field, err, errlen)) return -1;
  const char *s = n->scalar;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (*s == '\0' || *end != '\0' || !isfinite(v))
    return gcoll_ydoc_error(doc, n, field, err, errlen, "expected a number, found '%.40s'", s);
  if (errno == ERANGE || v < min || v > max)
    return gcoll_ydoc_error(doc, n, field, err, errlen, "%.40s is out of range [%g, %g]", s, min,
                            max);
  *out = v;
  return 0;
}

int gcoll_ydoc_bool(const struct ydoc *doc, const struct ydoc_node *n, const char *field, int *out,
                    char *err, size_t errlen) {
  if (gcoll_ydoc_expect(doc, n, YDOC_SCALAR, field, err, errlen)) return -1;
  const char *s = n->scalar;
  if (!strcmp(s, "true") || !strcmp(s, "yes")) *out = 1;
  else if (!strcmp(s, "false") || !strcmp(s, "no")) *out = 0;
  else
    return gcoll_ydoc_error(doc, n, field, err, errlen, "expected true or false, found '%.40s'", s);
  return 0;
}

int gcoll_ydoc_str(const struct ydoc *doc, const struct ydoc_node *n, const char *field, char *out,
                   size_t outlen, char *err, size_t errlen) {
  if (gcoll_ydoc_expect(doc, n, YDOC_SCALAR, field, err, errlen)) return -1;
  if (n->len >= outlen)
    return gcoll_ydoc_error(doc, n, field, err, errlen, "longer than %zu characters", outlen - 1);
  memcpy(out, n->scalar, n->len + 1);
  return 0;
}
