#include "yaml_doc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

/* Nodes and strings live in one arena so freeing a document is O(chunks)
 * and parsing a 100,000-rank plan does not pay one malloc per scalar. */
struct arena_chunk {
  struct arena_chunk *next;
  size_t used, cap;
  max_align_t data[];
};

static void *arena_alloc(struct ydoc *doc, size_t n) {
  struct arena_chunk *c = doc->arena;
  n = (n + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
  if (c == NULL || c->cap - c->used < n) {
    size_t cap = n > 65536 ? n : 65536;
    struct arena_chunk *nc = malloc(sizeof(*nc) + cap);
    if (nc == NULL) return NULL;
    nc->next = c;
    nc->used = 0;
    nc->cap = cap;
    doc->arena = nc;
    c = nc;
  }
  void *p = (char *)c->data + c->used;
  c->used += n;
  return p;
}

void ydoc_free(struct ydoc *doc) {
  struct arena_chunk *c = doc->arena;
  while (c) {
    struct arena_chunk *next = c->next;
    free(c);
    c = next;
  }
  doc->arena = NULL;
  doc->root = NULL;
}

/* Children are collected on a growable stack while a collection is open,
 * then copied into the arena when it closes. */
struct build_frame {
  struct ydoc_node *node;
  size_t first;  /* index into the item stack */
};

struct builder {
  struct ydoc_node **items;
  size_t nitems, capitems;
  struct build_frame frames[YDOC_MAX_DEPTH + 1];
  int depth;
  size_t nnodes;
};

static int push_item(struct builder *b, struct ydoc_node *n) {
  if (b->nitems == b->capitems) {
    size_t cap = b->capitems ? b->capitems * 2 : 256;
    struct ydoc_node **p = realloc(b->items, cap * sizeof(*p));
    if (p == NULL) return -1;
    b->items = p;
    b->capitems = cap;
  }
  b->items[b->nitems++] = n;
  return 0;
}

static int fail(const char *what, int line, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int fail(const char *what, int line, char *err, size_t errlen, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (err && errlen) snprintf(err, errlen, "%s:%d: %s", what, line, msg);
  return -1;
}

/* Adds a finished node to its parent (or makes it the root). */
static int attach(struct ydoc *doc, struct builder *b, struct ydoc_node *n) {
  if (b->depth == 0) {
    doc->root = n;
    return 0;
  }
  return push_item(b, n);
}

int ydoc_parse(struct ydoc *doc, const char *buf, size_t len, const char *what,
               char *err, size_t errlen) {
  yaml_parser_t parser;
  yaml_event_t ev;
  struct builder b;
  int rc = -1, done = 0, ndocs = 0;

  memset(doc, 0, sizeof(*doc));
  memset(&b, 0, sizeof(b));
  doc->what = what ? what : "<input>";
  if (!yaml_parser_initialize(&parser))
    return fail(doc->what, 0, err, errlen, "cannot initialise the YAML parser");
  yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);

  while (!done) {
    if (!yaml_parser_parse(&parser, &ev)) {
      fail(doc->what, (int)parser.problem_mark.line + 1, err, errlen, "malformed YAML: %s",
           parser.problem ? parser.problem : "parse error");
      goto out;
    }
    int line = (int)ev.start_mark.line + 1;
    switch (ev.type) {
      case YAML_STREAM_END_EVENT:
        done = 1;
        break;
      case YAML_DOCUMENT_START_EVENT:
        if (++ndocs > 1) {
          fail(doc->what, line, err, errlen, "more than one YAML document");
          yaml_event_delete(&ev);
          goto out;
        }
        break;
      case YAML_ALIAS_EVENT:
        fail(doc->what, line, err, errlen, "YAML aliases are not allowed");
        yaml_event_delete(&ev);
        goto out;
      case YAML_SCALAR_EVENT:
      case YAML_SEQUENCE_START_EVENT:
      case YAML_MAPPING_START_EVENT: {
        if (ev.type == YAML_SCALAR_EVENT ? ev.data.scalar.anchor != NULL
            : ev.type == YAML_SEQUENCE_START_EVENT ? ev.data.sequence_start.anchor != NULL
                                                  : ev.data.mapping_start.anchor != NULL) {
          fail(doc->what, line, err, errlen, "YAML anchors are not allowed");
          yaml_event_delete(&ev);
          goto out;
        }
        if (++b.nnodes > YDOC_MAX_NODES) {
          fail(doc->what, line, err, errlen, "document too large (more than %u nodes)",
               YDOC_MAX_NODES);
          yaml_event_delete(&ev);
          goto out;
        }
        struct ydoc_node *n = arena_alloc(doc, sizeof(*n));
        if (n == NULL) {
          fail(doc->what, line, err, errlen, "out of memory");
          yaml_event_delete(&ev);
          goto out;
        }
        memset(n, 0, sizeof(*n));
        n->line = line;
        if (ev.type == YAML_SCALAR_EVENT) {
          size_t sl = ev.data.scalar.length;
          if (sl > YDOC_MAX_SCALAR) {
            fail(doc->what, line, err, errlen, "value longer than %d bytes", YDOC_MAX_SCALAR);
            yaml_event_delete(&ev);
            goto out;
          }
          char *s = arena_alloc(doc, sl + 1);
          if (s == NULL) {
            fail(doc->what, line, err, errlen, "out of memory");
            yaml_event_delete(&ev);
            goto out;
          }
          memcpy(s, ev.data.scalar.value, sl);
          s[sl] = '\0';
          if (memchr(s, '\0', sl) != NULL) {
            fail(doc->what, line, err, errlen, "NUL byte inside a value");
            yaml_event_delete(&ev);
            goto out;
          }
          n->kind = YDOC_SCALAR;
          n->scalar = s;
          n->len = sl;
          if (attach(doc, &b, n) != 0) {
            fail(doc->what, line, err, errlen, "out of memory");
            yaml_event_delete(&ev);
            goto out;
          }
        } else {
          if (b.depth >= YDOC_MAX_DEPTH) {
            fail(doc->what, line, err, errlen, "nesting deeper than %d levels", YDOC_MAX_DEPTH);
            yaml_event_delete(&ev);
            goto out;
          }
          n->kind = ev.type == YAML_SEQUENCE_START_EVENT ? YDOC_SEQ : YDOC_MAP;
          b.depth++;
          b.frames[b.depth].node = n;
          b.frames[b.depth].first = b.nitems;
        }
        break;
      }
      case YAML_SEQUENCE_END_EVENT:
      case YAML_MAPPING_END_EVENT: {
        struct build_frame *f = &b.frames[b.depth];
        struct ydoc_node *n = f->node;
        size_t cnt = b.nitems - f->first;
        if (cnt) {
          n->items = arena_alloc(doc, cnt * sizeof(*n->items));
          if (n->items == NULL) {
            fail(doc->what, line, err, errlen, "out of memory");
            yaml_event_delete(&ev);
            goto out;
          }
          memcpy(n->items, b.items + f->first, cnt * sizeof(*n->items));
        }
        n->len = n->kind == YDOC_MAP ? cnt / 2 : cnt;
        if (n->kind == YDOC_MAP) {
          for (size_t i = 0; i < cnt; i += 2) {
            if (n->items[i]->kind != YDOC_SCALAR) {
              fail(doc->what, n->items[i]->line, err, errlen, "mapping keys must be plain values");
              yaml_event_delete(&ev);
              goto out;
            }
            for (size_t j = 0; j < i; j += 2)
              if (strcmp(n->items[j]->scalar, n->items[i]->scalar) == 0) {
                fail(doc->what, n->items[i]->line, err, errlen, "field '%s' appears twice",
                     n->items[i]->scalar);
                yaml_event_delete(&ev);
                goto out;
              }
          }
        }
        b.nitems = f->first;
        b.depth--;
        if (attach(doc, &b, n) != 0) {
          fail(doc->what, line, err, errlen, "out of memory");
          yaml_event_delete(&ev);
          goto out;
        }
        break;
      }
      default:
        break;
    }
    yaml_event_delete(&ev);
  }
  rc = 0;
out:
  yaml_parser_delete(&parser);
  free(b.items);
  if (rc != 0) ydoc_free(doc);
  return rc;
}

/* Duplicate-key checks above are quadratic per map; maps here are small
 * (a handful of fields), the big collections are sequences. */
const struct ydoc_node *ydoc_get(const struct ydoc_node *map, const char *key) {
  if (map == NULL || map->kind != YDOC_MAP) return NULL;
  for (size_t i = 0; i < map->len; i++)
    if (strcmp(map->items[2 * i]->scalar, key) == 0) return map->items[2 * i + 1];
  return NULL;
}

size_t ydoc_count(const struct ydoc_node *n) {
  return n && n->kind != YDOC_SCALAR ? n->len : 0;
}

const struct ydoc_node *ydoc_item(const struct ydoc_node *seq, size_t i) {
  return seq && seq->kind == YDOC_SEQ && i < seq->len ? seq->items[i] : NULL;
}

const char *ydoc_key(const struct ydoc_node *map, size_t i) {
  return map && map->kind == YDOC_MAP && i < map->len ? map->items[2 * i]->scalar : NULL;
}

const struct ydoc_node *ydoc_value(const struct ydoc_node *map, size_t i) {
  return map && map->kind == YDOC_MAP && i < map->len ? map->items[2 * i + 1] : NULL;
}

int ydoc_error(const struct ydoc *doc, const struct ydoc_node *n, const char *field,
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
  }
  return -1;
}

static const char *kind_name(enum ydoc_kind k) {
  return k == YDOC_SCALAR ? "a value" : k == YDOC_SEQ ? "a list" : "a mapping";
}

int ydoc_expect(const struct ydoc *doc, const struct ydoc_node *n, enum ydoc_kind kind,
                const char *field, char *err, size_t errlen) {
  if (n == NULL) return ydoc_error(doc, NULL, field, err, errlen, "missing");
  if (n->kind != kind)
    return ydoc_error(doc, n, field, err, errlen, "expected %s, found %s", kind_name(kind),
                      kind_name(n->kind));
  return 0;
}

int ydoc_req(const struct ydoc *doc, const struct ydoc_node *map, const char *field,
             const struct ydoc_node **out, char *err, size_t errlen) {
  if (map == NULL || map->kind != YDOC_MAP)
    return ydoc_error(doc, map, field, err, errlen, "expected a mapping around it");
  *out = ydoc_get(map, field);
  if (*out == NULL) return ydoc_error(doc, map, field, err, errlen, "missing");
  return 0;
}

int ydoc_int(const struct ydoc *doc, const struct ydoc_node *n, const char *field,
             int64_t min, int64_t max, int64_t *out, char *err, size_t errlen) {
  if (ydoc_expect(doc, n, YDOC_SCALAR, field, err, errlen)) return -1;
  const char *s = n->scalar;
  char *end;
  errno = 0;
  if (*s == '\0' || (*s != '-' && (*s < '0' || *s > '9')))
    return ydoc_error(doc, n, field, err, errlen, "expected an integer, found '%.40s'", s);
  long long v = strtoll(s, &end, 10);
  if (*end != '\0')
    return ydoc_error(doc, n, field, err, errlen, "expected an integer, found '%.40s'", s);
  if (errno == ERANGE || v < min || v > max)
    return ydoc_error(doc, n, field, err, errlen, "%.40s is out of range [%lld, %lld]", s,
                      (long long)min, (long long)max);
  *out = v;
  return 0;
}

int ydoc_double(const struct ydoc *doc, const struct ydoc_node *n, const char *field,
                double min, double max, double *out, char *err, size_t errlen) {
  if (ydoc_expect(doc, n, YDOC_SCALAR, field, err, errlen)) return -1;
  const char *s = n->scalar;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (*s == '\0' || *end != '\0' || !isfinite(v))
    return ydoc_error(doc, n, field, err, errlen, "expected a number, found '%.40s'", s);
  if (errno == ERANGE || v < min || v > max)
    return ydoc_error(doc, n, field, err, errlen, "%.40s is out of range [%g, %g]", s, min,
                      max);
  *out = v;
  return 0;
}

int ydoc_bool(const struct ydoc *doc, const struct ydoc_node *n, const char *field, int *out,
              char *err, size_t errlen) {
  if (ydoc_expect(doc, n, YDOC_SCALAR, field, err, errlen)) return -1;
  const char *s = n->scalar;
  if (!strcmp(s, "true") || !strcmp(s, "yes")) *out = 1;
  else if (!strcmp(s, "false") || !strcmp(s, "no")) *out = 0;
  else return ydoc_error(doc, n, field, err, errlen, "expected true or false, found '%.40s'", s);
  return 0;
}

int ydoc_str(const struct ydoc *doc, const struct ydoc_node *n, const char *field, char *out,
             size_t outlen, char *err, size_t errlen) {
  if (ydoc_expect(doc, n, YDOC_SCALAR, field, err, errlen)) return -1;
  if (n->len >= outlen)
    return ydoc_error(doc, n, field, err, errlen, "longer than %zu characters", outlen - 1);
  memcpy(out, n->scalar, n->len + 1);
  return 0;
}

int gcoll_read_file(const char *path, size_t max_bytes, char **buf, size_t *len, char *err,
                    size_t errlen) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  char *p = NULL;
  size_t got = 0;
  if (fd < 0) {
    snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    return -1;
  }
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    snprintf(err, errlen, "%s: not a regular file", path);
    goto fail;
  }
  if ((uint64_t)st.st_size > max_bytes) {
    snprintf(err, errlen, "%s: %lld bytes is larger than the %zu-byte limit", path,
             (long long)st.st_size, max_bytes);
    goto fail;
  }
  p = malloc((size_t)st.st_size + 1);
  if (p == NULL) {
    snprintf(err, errlen, "%s: out of memory", path);
    goto fail;
  }
  while (got < (size_t)st.st_size) {
    ssize_t r = read(fd, p + got, (size_t)st.st_size - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      snprintf(err, errlen, "%s: read failed: %s", path, strerror(errno));
      goto fail;
    }
    if (r == 0) break; /* truncated while reading: parse what is there */
    got += (size_t)r;
  }
  p[got] = '\0';
  close(fd);
  *buf = p;
  *len = got;
  return 0;
fail:
  free(p);
  close(fd);
  return -1;
}

int gcoll_atomic_write(const char *path,
                       int (*fn)(void *FILE_stream, const void *arg, char *err, size_t errlen),
                       const void *arg, char *err, size_t errlen) {
  size_t n = strlen(path);
  char *tmp = malloc(n + 32);
  FILE *f = NULL;
  int fd = -1, rc = -1;
  if (tmp == NULL) {
    snprintf(err, errlen, "%s: out of memory", path);
    return -1;
  }
  snprintf(tmp, n + 32, "%s.tmp.%ld", path, (long)getpid());
  fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    snprintf(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
    goto out;
  }
  f = fdopen(fd, "w");
  if (f == NULL) {
    snprintf(err, errlen, "%s: %s", tmp, strerror(errno));
    close(fd);
    unlink(tmp);
    goto out;
  }
  if (fn(f, arg, err, errlen) != 0) goto drop;
  if (fflush(f) != 0 || ferror(f)) {
    snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
    goto drop;
  }
  if (fsync(fileno(f)) != 0) {
    snprintf(err, errlen, "%s: fsync failed: %s", path, strerror(errno));
    goto drop;
  }
  if (fclose(f) != 0) {
    f = NULL;
    snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
    unlink(tmp);
    goto out;
  }
  f = NULL;
  if (rename(tmp, path) != 0) {
    snprintf(err, errlen, "%s: cannot rename into place: %s", path, strerror(errno));
    unlink(tmp);
    goto out;
  }
  rc = 0;
  goto out;
drop:
  fclose(f);
  unlink(tmp);
out:
  free(tmp);
  return rc;
}
