/* A small read-only YAML document built from libyaml's event parser, with
 * line numbers kept on every node so that readers can report
 * "FILE:LINE: field 'x': reason" in one line. Shared by the topology and
 * plan readers. Limits (depth, node count, scalar length, memory per byte of
 * input) are enforced while parsing, before each allocation, so hostile
 * input cannot exhaust memory, time or the stack. */
#ifndef GCOLL_GRAPH_YAML_DOC_H
#define GCOLL_GRAPH_YAML_DOC_H

#include <stddef.h>
#include <stdint.h>

enum ydoc_kind { YDOC_SCALAR, YDOC_SEQ, YDOC_MAP };

/* 16 bytes, because a dense hostile file ("[1,1,1,...") makes one node per
 * two bytes of input. `scalar` and `items` share storage: read `scalar`
 * only after checking kind (gcoll_ydoc_expect, gcoll_ydoc_str, gcoll_ydoc_int do). */
struct ydoc_node {
  union {
    const char *scalar;       /* YDOC_SCALAR: NUL-terminated value */
    struct ydoc_node **items; /* SEQ: items; MAP: key, value, key, value ... */
  };
  uint32_t len;               /* scalar length, or number of children */
  unsigned kind : 2;          /* enum ydoc_kind */
  unsigned line : 30;         /* 1-based */
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
/* Memory a document may hold while parsing: this many bytes per byte of
 * input, plus a fixed allowance for small, densely written files. Real
 * plans and topologies need 4 to 6.5 per byte. */
#define YDOC_MEM_PER_BYTE 8
#define YDOC_MEM_SLACK ((size_t)4 << 20)

/* Parses one document. Returns 0, or -1 with "WHAT:LINE: reason" in err.
 * Aliases, anchors and tags other than the core ones are refused. */
int gcoll_ydoc_parse(struct ydoc *doc, const char *buf, size_t len, const char *what,
                     char *err, size_t errlen);
void gcoll_ydoc_free(struct ydoc *doc);

/* Map lookup: value node for `key`, NULL if absent or not a map. */
const struct ydoc_node *gcoll_ydoc_get(const struct ydoc_node *map, const char *key);
/* Number of entries of a map (pairs) or sequence (items). */
size_t gcoll_ydoc_count(const struct ydoc_node *n);
const struct ydoc_node *gcoll_ydoc_item(const struct ydoc_node *seq, size_t i);
const char *gcoll_ydoc_key(const struct ydoc_node *map, size_t i);
const struct ydoc_node *gcoll_ydoc_value(const struct ydoc_node *map, size_t i);

/* Typed field readers. On failure they format
 * "WHAT:LINE: field 'FIELD': reason" into err and return -1. A missing
 * required field is reported at the map's line. */
int gcoll_ydoc_req(const struct ydoc *doc, const struct ydoc_node *map, const char *field,
                   const struct ydoc_node **out, char *err, size_t errlen);
int gcoll_ydoc_int(const struct ydoc *doc, const struct ydoc_node *n, const char *field,
                   int64_t min, int64_t max, int64_t *out, char *err, size_t errlen);
int gcoll_ydoc_double(const struct ydoc *doc, const struct ydoc_node *n, const char *field,
                      double min, double max, double *out, char *err, size_t errlen);
int gcoll_ydoc_bool(const struct ydoc *doc, const struct ydoc_node *n, const char *field,
                    int *out, char *err, size_t errlen);
/* Copies a scalar into a fixed buffer; too long is an error. */
int gcoll_ydoc_str(const struct ydoc *doc, const struct ydoc_node *n, const char *field,
                   char *out, size_t outlen, char *err, size_t errlen);
/* Requires n to be of the given kind. */
int gcoll_ydoc_expect(const struct ydoc *doc, const struct ydoc_node *n, enum ydoc_kind kind,
                      const char *field, char *err, size_t errlen);
/* Formats an error at node n's line. Always returns -1. */
int gcoll_ydoc_error(const struct ydoc *doc, const struct ydoc_node *n, const char *field,
                     char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* Reads a whole regular file (size-checked against max_bytes) into a
 * malloc'd NUL-terminated buffer. Anything else (FIFO, device, directory,
 * socket) is refused with one line before it is opened, and the open itself
 * cannot block, so a hostile path never hangs or feeds the reader. */
int gcoll_read_file(const char *path, size_t max_bytes, char **buf, size_t *len,
                    char *err, size_t errlen);

/* Final mode of files gcoll_atomic_write creates (readable plans). */
#define GCOLL_ATOMIC_WRITE_MODE 0644

/* Atomic, durable file replacement: the callback writes to a FILE* on a
 * temporary with an unpredictable name in the target's directory, mode
 * 0600 while written; then fchmod to GCOLL_ATOMIC_WRITE_MODE, fsync,
 * rename, fsync of the directory. On any failure before the rename the
 * target is left untouched and the temporary removed. */
int gcoll_atomic_write(const char *path,
                       int (*fn)(void *FILE_stream, const void *arg, char *err, size_t errlen),
                       const void *arg, char *err, size_t errlen);

#endif
