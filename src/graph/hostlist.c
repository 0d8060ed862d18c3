/* Slurm-style host lists: "n[001-004,7],gpu-a,rack[1-2]n[1-2]".
 *
 * A list is a comma-separated sequence of items; an item is literal text
 * with up to HL_MAX_GROUPS bracket groups of numbers and ranges. Groups
 * multiply (the last one varies fastest, as in Slurm). A range "A-B" prints
 * every number with at least strlen(A) digits, so zero padding survives.
 * Everything is counted before anything is allocated, with the total capped
 * at GCOLL_MAX_NODES, so "n[0-999999999]" is an error, not an allocation. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/plan.h"

#define HL_MAX_GROUPS 8
#define HL_MAX_DIGITS 18  /* keeps every value below 10^18 < 2^63 */

struct hl_item {
  const char *s;
  size_t len;
  int ngroups;
  size_t open[HL_MAX_GROUPS], close[HL_MAX_GROUPS];  /* offsets of '[' and ']' */
};

struct hl_range {
  uint64_t lo, hi;
  int width;
};

/* The list is quoted with control characters shown as '?': a hostile list
 * holding a newline must not split the one-line message. */
static int hl_error(char *err, size_t errlen, const char *list, const char *reason) {
  char shown[61];
  size_t n = 0;
  for (; n < sizeof(shown) - 1 && list[n] != '\0'; n++)
    shown[n] = (unsigned char)list[n] < 0x20 || list[n] == 0x7f ? '?' : list[n];
  shown[n] = '\0';
  if (err && errlen) snprintf(err, errlen, "host list '%s': %s", shown, reason);
  return -1;
}

/* Characters that may appear in host names: no separators, brackets,
 * whitespace or control characters. */
static int is_name_char(unsigned char c) {
  return c > 0x20 && c != 0x7f && c != ',' && c != '[' && c != ']';
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* Finds the item starting at list[pos]: up to the next comma outside brackets. */
static int parse_item(const char *list, size_t pos, struct hl_item *it, size_t *next,
                      char *err, size_t errlen) {
  size_t i = pos;
  int inside = 0;
  memset(it, 0, sizeof(*it));
  it->s = list + pos;
  for (; list[i] != '\0' && (inside || list[i] != ','); i++) {
    char c = list[i];
    if (c == '[') {
      if (inside) return hl_error(err, errlen, list, "nested '[' is not allowed");
      if (it->ngroups == HL_MAX_GROUPS)
        return hl_error(err, errlen, list, "more than 8 bracket groups in one host name");
      it->open[it->ngroups] = i - pos;
      inside = 1;
    } else if (c == ']') {
      if (!inside) return hl_error(err, errlen, list, "']' without '['");
      if (i - pos == it->open[it->ngroups] + 1)
        return hl_error(err, errlen, list, "empty '[]'");
      it->close[it->ngroups++] = i - pos;
      inside = 0;
    } else if (inside) {
      if (!is_digit(c) && c != '-' && c != ',')
        return hl_error(err, errlen, list, "only digits, '-' and ',' may appear inside '[...]'");
    } else if (!is_name_char((unsigned char)c)) {
      return hl_error(err, errlen, list, "invalid character in a host name");
    }
  }
  if (inside) return hl_error(err, errlen, list, "'[' without ']'");
  it->len = i - pos;
  if (it->len == 0) return hl_error(err, errlen, list, "empty host name");
  *next = list[i] == ',' ? i + 1 : i;
  if (list[i] == ',' && list[i + 1] == '\0')
    return hl_error(err, errlen, list, "empty host name after the last ','");
  return 0;
}

static int parse_number(const char *p, size_t n, uint64_t *v) {
  if (n == 0 || n > HL_MAX_DIGITS) return -1;
  uint64_t x = 0;
  for (size_t i = 0; i < n; i++) {
    if (!is_digit(p[i])) return -1;
    x = x * 10 + (uint64_t)(p[i] - '0');
  }
  *v = x;
  return 0;
}

/* Reads the range at *p (inside a group ending at end) and advances *p past
 * it and its comma. */
static int next_range(const char *list, const char **p, const char *end, struct hl_range *r,
                      char *err, size_t errlen) {
  const char *q = *p;
  while (q < end && *q != ',') q++;
  const char *dash = memchr(*p, '-', (size_t)(q - *p));
  size_t lolen = dash ? (size_t)(dash - *p) : (size_t)(q - *p);
  if (parse_number(*p, lolen, &r->lo) != 0)
    return hl_error(err, errlen, list, "bad number in '[...]' (1 to 18 digits)");
  r->hi = r->lo;
  if (dash && parse_number(dash + 1, (size_t)(q - dash - 1), &r->hi) != 0)
    return hl_error(err, errlen, list, "bad range in '[...]' (A-B, 1 to 18 digits each)");
  if (r->hi < r->lo) return hl_error(err, errlen, list, "range with its end before its start");
  r->width = (int)lolen;
  if (q < end && q + 1 == end) return hl_error(err, errlen, list, "empty entry in '[...]'");
  if (q < end && q[1] == ',') return hl_error(err, errlen, list, "empty entry in '[...]'");
  *p = q < end ? q + 1 : q;
  return 0;
}

static int group_count(const char *list, const struct hl_item *it, int g, uint64_t *count,
                       char *err, size_t errlen) {
  const char *p = it->s + it->open[g] + 1, *end = it->s + it->close[g];
  uint64_t total = 0;
  if (*p == ',') return hl_error(err, errlen, list, "empty entry in '[...]'");
  while (p < end) {
    struct hl_range r;
    if (next_range(list, &p, end, &r, err, errlen) != 0) return -1;
    if (r.hi - r.lo >= GCOLL_MAX_NODES || (total += r.hi - r.lo + 1) > GCOLL_MAX_NODES)
      return hl_error(err, errlen, list, "more than 1048576 hosts");
  }
  *count = total;
  return 0;
}

static int item_count(const char *list, const struct hl_item *it, uint64_t *count, char *err,
                      size_t errlen) {
  uint64_t total = 1;
  for (int g = 0; g < it->ngroups; g++) {
    uint64_t c;
    if (group_count(list, it, g, &c, err, errlen) != 0) return -1;
    total *= c;  /* both factors <= 2^20: no overflow */
    if (total > GCOLL_MAX_NODES) return hl_error(err, errlen, list, "more than 1048576 hosts");
  }
  *count = total;
  return 0;
}

/* The idx-th number of group g (already validated by group_count). */
static void group_value(const struct hl_item *it, int g, uint64_t idx, uint64_t *value,
                        int *width) {
  const char *p = it->s + it->open[g] + 1, *end = it->s + it->close[g];
  struct hl_range r = {0, 0, 1};
  while (p < end) {
    next_range("", &p, end, &r, NULL, 0);
    if (idx <= r.hi - r.lo) break;
    idx -= r.hi - r.lo + 1;
  }
  *value = r.lo + idx;
  *width = r.width;
}

/* Writes the idx-th name of a validated item; groups[g] holds each group's count. */
static int item_name(const char *list, const struct hl_item *it, const uint64_t *counts,
                     uint64_t idx, char *out, size_t outlen, char *err, size_t errlen) {
  uint64_t sub[HL_MAX_GROUPS];
  for (int g = it->ngroups - 1; g >= 0; g--) {
    sub[g] = idx % counts[g];
    idx /= counts[g];
  }
  size_t o = 0, pos = 0;
  for (int g = 0; g <= it->ngroups; g++) {
    size_t lit_end = g < it->ngroups ? it->open[g] : it->len;
    size_t n = lit_end - pos;
    if (o + n >= outlen) return hl_error(err, errlen, list, "host name too long");
    memcpy(out + o, it->s + pos, n);
    o += n;
    if (g == it->ngroups) break;
    uint64_t v;
    int w;
    group_value(it, g, sub[g], &v, &w);
    int k = snprintf(out + o, outlen - o, "%0*llu", w, (unsigned long long)v);
    if (k < 0 || (size_t)k >= outlen - o) return hl_error(err, errlen, list, "host name too long");
    o += (size_t)k;
    pos = it->close[g] + 1;
  }
  out[o] = '\0';
  return 0;
}

static int item_counts(const char *list, const struct hl_item *it, uint64_t *counts,
                       char *err, size_t errlen) {
  for (int g = 0; g < it->ngroups; g++)
    if (group_count(list, it, g, &counts[g], err, errlen) != 0) return -1;
  return 0;
}

int gcoll_hostlist_count(const char *list, int *nhosts, char *err, size_t errlen) {
  if (list == NULL || *list == '\0') return hl_error(err, errlen, "", "empty host list");
  uint64_t total = 0;
  size_t pos = 0;
  while (list[pos] != '\0') {
    struct hl_item it;
    uint64_t c;
    if (parse_item(list, pos, &it, &pos, err, errlen) != 0) return -1;
    if (item_count(list, &it, &c, err, errlen) != 0) return -1;
    if ((total += c) > GCOLL_MAX_NODES)
      return hl_error(err, errlen, list, "more than 1048576 hosts");
  }
  *nhosts = (int)total;
  return 0;
}

int gcoll_hostlist_nth(const char *list, int idx, char *out, size_t outlen, char *err,
                       size_t errlen) {
  int n;
  if (gcoll_hostlist_count(list, &n, err, errlen) != 0) return -1;
  if (idx < 0 || idx >= n) return hl_error(err, errlen, list, "host index out of range");
  size_t pos = 0;
  uint64_t left = (uint64_t)idx;
  for (;;) {
    struct hl_item it;
    uint64_t counts[HL_MAX_GROUPS], c;
    parse_item(list, pos, &it, &pos, NULL, 0);
    item_counts(list, &it, counts, NULL, 0);
    item_count(list, &it, &c, NULL, 0);
    if (left < c) return item_name(list, &it, counts, left, out, outlen, err, errlen);
    left -= c;
  }
}

void gcoll_hostlist_free(char **hosts, int nhosts) {
  if (hosts == NULL) return;
  for (int i = 0; i < nhosts; i++) free(hosts[i]);
  free(hosts);
}

int gcoll_hostlist_expand(const char *list, char ***hosts, int *nhosts, char *err,
                          size_t errlen) {
  int n;
  if (gcoll_hostlist_count(list, &n, err, errlen) != 0) return -1;
  char **h = calloc((size_t)n, sizeof(*h));
  if (h == NULL) return hl_error(err, errlen, list, "out of memory");
  size_t pos = 0;
  int k = 0;
  char name[GCOLL_PLAN_HOST_MAX];
  while (k < n) {
    struct hl_item it;
    uint64_t counts[HL_MAX_GROUPS], c;
    parse_item(list, pos, &it, &pos, NULL, 0);
    item_counts(list, &it, counts, NULL, 0);
    item_count(list, &it, &c, NULL, 0);
    for (uint64_t j = 0; j < c; j++, k++) {
      if (item_name(list, &it, counts, j, name, sizeof(name), err, errlen) != 0) goto fail;
      if ((h[k] = strdup(name)) == NULL) {
        hl_error(err, errlen, list, "out of memory");
        goto fail;
      }
    }
  }
  *hosts = h;
  *nhosts = n;
  return 0;
fail:
  gcoll_hostlist_free(h, n);
  return -1;
}

/* ---- compression --------------------------------------------------------- */

/* A host name split around its last digit group: prefix, digits, suffix. */
struct hl_name {
  const char *s;
  size_t len;
  size_t dstart, dlen;   /* dlen == 0: no usable number */
  uint64_t value;
};

static int split_name(const char *s, struct hl_name *nm) {
  size_t len = strlen(s);
  if (len == 0 || len >= GCOLL_PLAN_HOST_MAX) return -1;
  for (size_t i = 0; i < len; i++)
    if (!is_name_char((unsigned char)s[i])) return -1;
  nm->s = s;
  nm->len = len;
  nm->dlen = 0;
  size_t e = len;
  while (e > 0 && !is_digit(s[e - 1])) e--;
  size_t b = e;
  while (b > 0 && is_digit(s[b - 1])) b--;
  if (e > b && parse_number(s + b, e - b, &nm->value) == 0) {
    nm->dstart = b;
    nm->dlen = e - b;
  }
  return 0;
}

/* Same prefix and suffix around a number: can share one bracket group. */
static int same_pattern(const struct hl_name *a, const struct hl_name *b) {
  return a->dlen && b->dlen && a->dstart == b->dstart &&
         a->len - a->dstart - a->dlen == b->len - b->dstart - b->dlen &&
         memcmp(a->s, b->s, a->dstart) == 0 &&
         strcmp(a->s + a->dstart + a->dlen, b->s + b->dstart + b->dlen) == 0;
}

/* Whether b's number continues a range whose first number was written with
 * `width` digits and whose last value is `hi`: expanding the range must
 * print exactly b's digits. */
static int continues_range(const struct hl_name *b, uint64_t hi, int width) {
  char buf[32];
  if (b->value != hi + 1) return 0;
  int k = snprintf(buf, sizeof(buf), "%0*llu", width, (unsigned long long)b->value);
  return k == (int)b->dlen && memcmp(buf, b->s + b->dstart, b->dlen) == 0;
}

struct strbuf {
  char *p;
  size_t len, cap;
  int failed;
};

static void sb_add(struct strbuf *sb, const char *s, size_t n) {
  if (sb->failed) return;
  if (sb->len + n + 1 > sb->cap) {
    size_t cap = sb->cap ? sb->cap : 64;
    while (cap < sb->len + n + 1) cap *= 2;
    char *p = realloc(sb->p, cap);
    if (p == NULL) {
      sb->failed = 1;
      return;
    }
    sb->p = p;
    sb->cap = cap;
  }
  memcpy(sb->p + sb->len, s, n);
  sb->len += n;
  sb->p[sb->len] = '\0';
}

/* Emits names[0..n) (all of one pattern) as prefix[ranges]suffix. */
static void emit_group(struct strbuf *sb, const struct hl_name *nm, int n) {
  if (n == 1) {
    sb_add(sb, nm[0].s, nm[0].len);
    return;
  }
  sb_add(sb, nm[0].s, nm[0].dstart);
  sb_add(sb, "[", 1);
  for (int i = 0; i < n;) {
    int j = i + 1;
    int width = (int)nm[i].dlen;
    while (j < n && continues_range(&nm[j], nm[j - 1].value, width)) j++;
    if (i > 0) sb_add(sb, ",", 1);
    sb_add(sb, nm[i].s + nm[i].dstart, nm[i].dlen);
    if (j - i > 1) {
      sb_add(sb, "-", 1);
      sb_add(sb, nm[j - 1].s + nm[j - 1].dstart, nm[j - 1].dlen);
    }
    i = j;
  }
  sb_add(sb, "]", 1);
  sb_add(sb, nm[0].s + nm[0].dstart + nm[0].dlen, nm[0].len - nm[0].dstart - nm[0].dlen);
}

char *gcoll_hostlist_compress(char *const *hosts, int n) {
  if (hosts == NULL || n <= 0) return NULL;
  struct hl_name *nm = malloc((size_t)n * sizeof(*nm));
  struct strbuf sb = {0};
  if (nm == NULL) return NULL;
  for (int i = 0; i < n; i++)
    if (hosts[i] == NULL || split_name(hosts[i], &nm[i]) != 0) goto fail;
  for (int i = 0; i < n;) {
    int j = i + 1;
    while (j < n && same_pattern(&nm[i], &nm[j])) j++;
    if (i > 0) sb_add(&sb, ",", 1);
    emit_group(&sb, nm + i, j - i);
    i = j;
  }
  if (sb.failed) goto fail;
  free(nm);
  return sb.p;
fail:
  free(nm);
  free(sb.p);
  return NULL;
}

int gcoll_hostlist_single_run(char *const *hosts, int n, size_t maxlen) {
  struct hl_name first, cur, prev;
  if (n <= 0 || hosts[0] == NULL || split_name(hosts[0], &first) != 0 || first.len > maxlen)
    return 0;
  if (!first.dlen) return 1;
  /* Length of prefix[items]suffix, kept exact as emit_group would write it. */
  size_t fixed = first.len - first.dlen + 2;
  size_t done = 0;                 /* closed items, each with its comma */
  size_t open_lo = first.dlen, open_hi = 0;  /* the range being extended */
  int width = (int)first.dlen;
  prev = first;
  int m = 1;
  for (; m < n; m++) {
    if (hosts[m] == NULL || split_name(hosts[m], &cur) != 0 || !same_pattern(&first, &cur))
      break;
    size_t ndone = done, nlo = open_lo, nhi = open_hi;
    int nwidth = width;
    if (continues_range(&cur, prev.value, width)) {
      nhi = cur.dlen;
    } else {
      ndone += open_lo + (open_hi ? open_hi + 1 : 0) + 1;
      nlo = cur.dlen;
      nhi = 0;
      nwidth = (int)cur.dlen;
    }
    if (fixed + ndone + nlo + (nhi ? nhi + 1 : 0) > maxlen) break;
    done = ndone;
    open_lo = nlo;
    open_hi = nhi;
    width = nwidth;
    prev = cur;
  }
  return m;
}
