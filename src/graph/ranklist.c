/* Rank lists: "0-7,16,20-30:2". Sub-communicators are described by the
 * parent ranks they take, and the common groups of a training job are
 * ranges (a tensor-parallel group: 8-15) or strides (a data-parallel
 * group: every 8th rank), so a list with steps stays a few characters
 * where a plain list of a 100,000-rank job's data-parallel group would be
 * 75 KB. The same text is what `gcoll-plan split --ranks` takes. */
#include "plan.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_num(const char **s, long *out) {
  char *end;
  if (**s < '0' || **s > '9') return -1;
  errno = 0;
  long v = strtol(*s, &end, 10);
  if (errno != 0) return -1;
  *s = end;
  *out = v;
  return 0;
}

int gcoll_ranklist_parse(const char *s, int max_rank, int **ranks, int *n, char *err,
                         size_t errlen) {
  *ranks = NULL;
  *n = 0;
  if (s == NULL || *s == '\0') {
    snprintf(err, errlen, "empty rank list");
    return -1;
  }
  int cap = 16, count = 0;
  int *out = malloc((size_t)cap * sizeof(*out));
  if (out == NULL) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  const char *p = s;
  for (;;) {
    const char *item = p;
    long a, b, step = 1;
    if (parse_num(&p, &a) != 0) goto syntax;
    b = a;
    if (*p == '-') {
      p++;
      if (parse_num(&p, &b) != 0) goto syntax;
      if (*p == ':') {
        p++;
        if (parse_num(&p, &step) != 0 || step < 1) goto syntax;
      }
    }
    if (*p != ',' && *p != '\0') goto syntax;
    if (b < a) {
      snprintf(err, errlen, "rank list '%.80s': range %ld-%ld runs backwards", s, a, b);
      goto fail;
    }
    if (b > max_rank) {
      snprintf(err, errlen, "rank list '%.80s': rank %ld is outside 0..%d", s, b, max_rank);
      goto fail;
    }
    for (long r = a; r <= b; r += step) {
      if (count == cap) {
        if (cap > max_rank + 1) {
          snprintf(err, errlen, "rank list '%.80s' has more than %d entries", s, max_rank + 1);
          goto fail;
        }
        cap *= 2;
        int *grown = realloc(out, (size_t)cap * sizeof(*out));
        if (grown == NULL) {
          snprintf(err, errlen, "out of memory");
          goto fail;
        }
        out = grown;
      }
      out[count++] = (int)r;
    }
    if (*p == '\0') break;
    p++;
    continue;
  syntax:
    snprintf(err, errlen, "rank list '%.80s': '%.20s' is not N, N-M or N-M:STEP", s, item);
    goto fail;
  }
  *ranks = out;
  *n = count;
  return 0;
fail:
  free(out);
  return -1;
}

char *gcoll_ranklist_format(const int *ranks, int n) {
  /* Each item is at most "2147483647-2147483647:2147483647," (34). */
  size_t cap = (size_t)(n > 0 ? n : 1) * 34 + 1, at = 0;
  char *out = malloc(cap);
  if (out == NULL) return NULL;
  out[0] = '\0';
  for (int i = 0; i < n;) {
    /* The longest increasing run with one step from i. */
    int j = i + 1;
    long step = j < n ? (long)ranks[j] - ranks[i] : 0;
    if (step >= 1)
      while (j + 1 < n && (long)ranks[j + 1] - ranks[j] == step) j++;
    int len = j < n ? j - i + 1 : 1;
    const char *sep = at > 0 ? "," : "";
    if (len >= 3 && step > 1) {
      at += (size_t)snprintf(out + at, cap - at, "%s%d-%d:%ld", sep, ranks[i], ranks[j], step);
    } else if (len >= 2 && step == 1) {
      at += (size_t)snprintf(out + at, cap - at, "%s%d-%d", sep, ranks[i], ranks[j]);
    } else {
      at += (size_t)snprintf(out + at, cap - at, "%s%d", sep, ranks[i]);
      len = 1;
    }
    i += len;
  }
  return out;
}
