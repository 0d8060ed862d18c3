/* A small read-only YAML document built from libyaml's event parser, with
 * line numbers kept on every node so that readers can report
 * "FILE:LINE: field 'x': reason" in one line. Shared by the topology and
 * plan readers. Limits (depth, node count, scalar length) are enforced while
 * parsing, so hostile input cannot exhaust memory or the stack. */
#ifndef GCOLL_GRAPH_YAML_DOC_H
#define GCOLL_GRAPH_YAML_DOC_H

#include <stddef.h>
#include <stdint.h>

enum ydoc_kind { YDOC_SCALAR, YDOC_SEQ, YDOC_MAP };

struct ydoc_node {
  enum ydoc_kind kind;
  int line;                   /* 1-based */
  const char *scalar;         /* YDOC_SCALAR: NUL-terminated value */
  size_t len;                 /* scalar length, or number of children */
  struct ydoc_node **items;   /* SEQ: items; MAP: key, value, key, value ... */
};

struct ydoc {
  const char *what;           /* file name used in messages */
  struct ydoc_node *root;     /* NULL for an empty document */
  /* private: arena */
  void *arena;
};

#define YDOC_MAX_DEPTH 32
#define YDOC_MAX_NODES (1u << 22)
#define YDOC_MAX_SCALAR 4096

/* Parses one document. Returns 0, or -1 with "WHAT:LINE: reason" in err.
 * Aliases, anchors and tags other than the core ones are refused. */
int ydoc_parse(struct ydoc *doc, const char *buf, size_t len, const char *what,
               char *err, size_t errlen);
void ydoc_free(struct ydoc *doc);

/* Map lookup: value node for `key`, NULL if absent or not a map. */
const struct ydoc_node *ydoc_get(const struct ydoc_node *map, const char *key);
/* Number of entries of a map (pairs) or sequence (items). */
size_t ydoc_count(const struct ydoc_node *n);
const struct ydoc_node *ydoc_item(const struct ydoc_node *seq, size_t i);
const char *ydoc_key(const struct ydoc_node *map, size_t i);
const struct ydoc_node *ydoc_value(const struct ydoc_node *map, size_t i);

/* Typed field readers. On failure they format
 * "WHAT:LINE: field 'FIELD': reason" into err and return -1. A missing
 * required field is reported at the map's line. */
int ydoc_req(const struct ydoc *doc, const struct ydoc_node *map, const char *field,
             const struct ydoc_node **out, char *err, size_t errlen);
int ydoc_int(const struct ydoc *doc, const struct ydoc_node *n, const char *field,
             int64_t min, int64_t max, int64_t *out, char *err, size_t errlen);
int ydoc_double(const struct ydoc *doc, const struct ydoc_node *n, const char *field,
                double min, double max, double *out, char *err, size_t errlen);
int ydoc_bool(const struct ydoc *doc, const struct ydoc_node *n, const char *field,
              int *out, char *err, size_t errlen);
/* Copies a scalar into a fixed buffer; too long is an error. */
int ydoc_str(const struct ydoc *doc, const struct ydoc_node *n, const char *field,
             char *out, size_t outlen, char *err, size_t errlen);
/* Requires n to be of the given kind. */
int ydoc_expect(const struct ydoc *doc, const struct ydoc_node *n, enum ydoc_kind kind,
                const char *field, char *err, size_t errlen);
/* Formats an error at node n's line. Always returns -1. */
int ydoc_error(const struct ydoc *doc, const struct ydoc_node *n, const char *field,
               char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* Reads a whole file (size-checked against max_bytes) into a malloc'd
 * NUL-terminated buffer. */
int gcoll_read_file(const char *path, size_t max_bytes, char **buf, size_t *len,
                    char *err, size_t errlen);

/* Atomic file replacement: write(tmp) + fsync + rename. The callback writes
 * to the FILE*; on any failure the target is left untouched and the
 * temporary removed. */
int gcoll_atomic_write(const char *path,
                       int (*fn)(void *FILE_stream, const void *arg, char *err, size_t errlen),
                       const void *arg, char *err, size_t errlen);

#endif
