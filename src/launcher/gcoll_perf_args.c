/* gcoll-perf options: nccl-tests spellings where they exist (-b -e -f -i -w
 * -n -c -z, sizes with K/M/G suffixes, type names), so users of
 * all_reduce_perf can type what they already know. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/reduce.h"
#include "launcher/gcoll_perf.h"

/* Large enough for any host buffer; small enough that 2x it cannot wrap. */
#define PERF_MAX_BYTES ((size_t)1 << 40)
#define PERF_MAX_ITERS 100000000L

static const char usage_text[] =
    "usage: gcollrun -n N " PERF_PROG " [options]\n"
    "\n"
    "Times gcoll collectives over a range of message sizes and checks the\n"
    "results, like nccl-tests' *_perf programs. Every rank runs it.\n"
    "\n"
    "  -o, --op COLL          allreduce|broadcast|reduce|allgather|reducescatter|\n"
    "                         alltoall|gather|scatter|sendrecv|all, or several\n"
    "                         separated by commas (default allreduce; all is\n"
    "                         the eight collectives, without sendrecv)\n"
    "  -b, --minbytes SIZE    smallest message (default 32M); K, M, G suffixes\n"
    "  -e, --maxbytes SIZE    largest message (default 32M)\n"
    "  -f, --stepfactor F     multiply the size by F each step (default 2)\n"
    "  -i, --stepbytes SIZE   or add SIZE each step\n"
    "  -t, --datatype TYPE    int8 uint8 int32 uint32 int64 uint64 half float double\n"
    "                         bfloat16, or all (default float); -d is the same\n"
    "  -r, --redop OP         sum|prod|max|min|avg|all (default sum)\n"
    "  -R, --root R           root of broadcast, reduce, gather and scatter\n"
    "                         (default 0)\n"
    "  -w, --warmup_iters N   untimed calls per size (default 5)\n"
    "  -n, --iters N          timed calls per size (default 20)\n"
    "  -c, --check 0|1        check one extra call per size (default 1)\n"
    "  -a, --algo ring|tree   force the algorithm (sets GCOLL_ALGO)\n"
    "  -p, --proto simple|ll  force the protocol (sets GCOLL_PROTO)\n"
    "  -z, --blocking 0|1     accepted for nccl-tests compatibility; calls\n"
    "                         always block\n"
    "  -M, --memory host|cuda buffers in host memory (default) or in device memory\n"
    "                         of GPU (local rank mod GPUs), run by the CUDA kernels\n"
    "  -h, --help             this help\n"
    "\n"
    "Sizes are the bytes of the largest buffer: for allgather, reducescatter,\n"
    "alltoall, gather and scatter the full nranks-block buffer, so each block\n"
    "is SIZE/nranks. time is the mean per call, the slowest rank's; algbw =\n"
    "size/time; busbw scales algbw by 2(n-1)/n for allreduce, (n-1)/n for\n"
    "allgather, reducescatter, alltoall, gather and scatter, 1 for broadcast\n"
    "and reduce and sendrecv, as nccl-tests does. sendrecv sends to the next\n"
    "rank and receives from the previous one in a group (its in-place half is\n"
    "N/A: a receive into the buffer its send reads races with it). #wrong\n"
    "counts wrong elements over all ranks; the exit status is 1 when any is.\n"
    "alltoall has no in-place form\n"
    "(gcoll refuses it, as NCCL does): its in-place half checks that the call\n"
    "is refused and moves nothing (time and bandwidths N/A; #wrong counts the\n"
    "ranks that accepted it and the elements it changed).\n"
    "\n"
    "For testing the checker: GCOLL_PERF_INJECT_ERROR=RANK corrupts one result\n"
    "element on that rank before every check.\n";

void perf_print_usage(void) { fputs(usage_text, stdout); }

static int bad(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return PERF_ARGS_BAD;
}

/* "128M" -> 134217728, as nccl-tests' parsesize (binary multiples). */
static int parse_size(const char *opt, const char *s, size_t *out, char *err, size_t errlen) {
  char *end;
  errno = 0;
  if (*s < '0' || *s > '9') return bad(err, errlen, "%s: '%s' is not a size", opt, s);
  unsigned long long v = strtoull(s, &end, 10);
  unsigned shift = 0;
  switch (*end) {
  case 'K': case 'k': shift = 10; end++; break;
  case 'M': case 'm': shift = 20; end++; break;
  case 'G': case 'g': shift = 30; end++; break;
  default: break;
  }
  if (errno != 0 || *end != '\0') return bad(err, errlen, "%s: '%s' is not a size", opt, s);
  if (v > PERF_MAX_BYTES >> shift)
    return bad(err, errlen, "%s: '%s' is larger than %zu bytes", opt, s, PERF_MAX_BYTES);
  *out = (size_t)(v << shift);
  return PERF_ARGS_OK;
}

static int parse_long(const char *opt, const char *s, long lo, long hi, long *out, char *err,
                      size_t errlen) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || errno != 0)
    return bad(err, errlen, "%s: '%s' is not an integer", opt, s);
  if (v < lo || v > hi) return bad(err, errlen, "%s: %ld is out of range %ld..%ld", opt, v, lo, hi);
  *out = v;
  return PERF_ARGS_OK;
}

/* "all" (the collectives: sendrecv only when named, as it is a separate
 * program in nccl-tests), one name, or names separated by commas. */
static int parse_coll(const char *s, unsigned *mask, char *err, size_t errlen) {
  unsigned m = 0;
  for (const char *p = s;; p++) {
    size_t len = strcspn(p, ",");
    int c = 0;
    if (len == 3 && strncmp(p, "all", 3) == 0) {
      m |= ((1u << PERF_NCOLLS) - 1) & ~(1u << PERF_SENDRECV);
    } else {
      while (c < PERF_NCOLLS && !(strlen(perf_coll_name((enum perf_coll)c)) == len &&
                                  strncmp(p, perf_coll_name((enum perf_coll)c), len) == 0))
        c++;
      if (c == PERF_NCOLLS)
        return bad(err, errlen,
                   "-o: unknown collective '%.*s' (allreduce, broadcast, reduce, allgather, "
                   "reducescatter, alltoall, gather, scatter, sendrecv or all, or several "
                   "separated by commas)", (int)len, p);
      m |= 1u << c;
    }
    p += len;
    if (*p == '\0') break;
  }
  *mask = m;
  return PERF_ARGS_OK;
}

static int parse_type(const char *s, unsigned *mask, char *err, size_t errlen) {
  if (strcmp(s, "all") == 0) {
    *mask = (1u << gcollNumTypes) - 1;
    return PERF_ARGS_OK;
  }
  int t = gcoll_dtype_from_name(s);
  if (t < 0)
    return bad(err, errlen,
               "-t: unknown type '%s' (int8 uint8 int32 uint32 int64 uint64 half float double "
               "bfloat16 or all)", s);
  *mask = 1u << t;
  return PERF_ARGS_OK;
}

static int parse_redop(const char *s, unsigned *mask, char *err, size_t errlen) {
  if (strcmp(s, "all") == 0) {
    *mask = (1u << gcollNumOps) - 1;
    return PERF_ARGS_OK;
  }
  int op = gcoll_redop_from_name(s);
  if (op < 0) return bad(err, errlen, "-r: unknown op '%s' (sum prod max min avg or all)", s);
  *mask = 1u << op;
  return PERF_ARGS_OK;
}

static int parse_choice(const char *opt, const char *s, const char *a, const char *b,
                        const char **out, char *err, size_t errlen) {
  if (strcmp(s, a) != 0 && strcmp(s, b) != 0)
    return bad(err, errlen, "%s: '%s' is not %s or %s", opt, s, a, b);
  *out = s;
  return PERF_ARGS_OK;
}

static void set_defaults(struct perf_opts *o) {
  memset(o, 0, sizeof(*o));
  o->coll_mask = 1u << PERF_ALLREDUCE;
  o->type_mask = 1u << gcollFloat;
  o->op_mask = 1u << gcollSum;
  o->minbytes = o->maxbytes = (size_t)32 << 20;
  o->stepfactor = 2;
  o->stepbytes = (size_t)1 << 20;
  o->root = 0;
  o->warmup = 5;
  o->iters = 20;
  o->check = 1;
}

static const struct option long_opts[] = {
    {"op", required_argument, NULL, 'o'},           {"minbytes", required_argument, NULL, 'b'},
    {"maxbytes", required_argument, NULL, 'e'},     {"stepfactor", required_argument, NULL, 'f'},
    {"stepbytes", required_argument, NULL, 'i'},    {"datatype", required_argument, NULL, 't'},
    {"redop", required_argument, NULL, 'r'},        {"root", required_argument, NULL, 'R'},
    {"warmup_iters", required_argument, NULL, 'w'}, {"iters", required_argument, NULL, 'n'},
    {"check", required_argument, NULL, 'c'},        {"algo", required_argument, NULL, 'a'},
    {"proto", required_argument, NULL, 'p'},        {"blocking", required_argument, NULL, 'z'},
    {"memory", required_argument, NULL, 'M'},
    {"help", no_argument, NULL, 'h'},               {NULL, 0, NULL, 0}};

static int parse_one(int ch, const char *arg, struct perf_opts *o, char *err, size_t errlen) {
  long v;
  int rc;
  switch (ch) {
  case 'o': return parse_coll(arg, &o->coll_mask, err, errlen);
  case 'b': return parse_size("-b", arg, &o->minbytes, err, errlen);
  case 'e': return parse_size("-e", arg, &o->maxbytes, err, errlen);
  case 'f':
    if ((rc = parse_long("-f", arg, 1, 1L << 20, &v, err, errlen)) != PERF_ARGS_OK) return rc;
    o->stepfactor = (size_t)v;
    return PERF_ARGS_OK;
  case 'i':
    if ((rc = parse_size("-i", arg, &o->stepbytes, err, errlen)) != PERF_ARGS_OK) return rc;
    o->stepfactor = 1; /* as in nccl-tests: -i means additive steps */
    return PERF_ARGS_OK;
  case 't': case 'd': return parse_type(arg, &o->type_mask, err, errlen);
  case 'r': return parse_redop(arg, &o->op_mask, err, errlen);
  case 'R': return parse_long("-R", arg, 0, 1L << 30, &o->root, err, errlen);
  case 'w': return parse_long("-w", arg, 0, PERF_MAX_ITERS, &o->warmup, err, errlen);
  case 'n': return parse_long("-n", arg, 1, PERF_MAX_ITERS, &o->iters, err, errlen);
  case 'c':
    if ((rc = parse_long("-c", arg, 0, 1, &v, err, errlen)) != PERF_ARGS_OK) return rc;
    o->check = (int)v;
    return PERF_ARGS_OK;
  case 'z': return parse_long("-z", arg, 0, 1, &v, err, errlen);
  case 'a': return parse_choice("-a", arg, "ring", "tree", &o->algo, err, errlen);
  case 'p': return parse_choice("-p", arg, "simple", "ll", &o->proto, err, errlen);
  case 'M': {
    const char *m = NULL;
    int parsed = parse_choice("-M", arg, "host", "cuda", &m, err, errlen);
    o->device_memory = parsed == PERF_ARGS_OK && strcmp(m, "cuda") == 0;
    return parsed;
  }
  default: return bad(err, errlen, "unknown option (see '" PERF_PROG " -h')");
  }
}

static int check_sweep(const struct perf_opts *o, char *err, size_t errlen) {
  if (o->minbytes > o->maxbytes)
    return bad(err, errlen, "-b %zu is larger than -e %zu", o->minbytes, o->maxbytes);
  if (o->stepfactor == 1 && o->stepbytes == 0 && o->minbytes < o->maxbytes)
    return bad(err, errlen, "-i 0 with -f 1 never reaches -e");
  if (o->stepfactor > 1 && o->minbytes == 0 && o->maxbytes > 0)
    return bad(err, errlen, "-b 0 never grows with -f; start at 1 or use -i");
  return PERF_ARGS_OK;
}

int perf_parse_args(int argc, char **argv, struct perf_opts *o, char *err, size_t errlen) {
  set_defaults(o);
  opterr = 0;
  optind = 1;
  int ch;
  while ((ch = getopt_long(argc, argv, ":o:b:e:f:i:t:d:r:R:w:n:c:a:p:z:M:h", long_opts, NULL)) !=
         -1) {
    if (ch == 'h') return PERF_ARGS_HELP;
    if (ch == ':') return bad(err, errlen, "%s needs a value", argv[optind - 1]);
    if (ch == '?') {
      if (optopt != 0)
        return bad(err, errlen, "unknown option -%c (see '" PERF_PROG " -h')", optopt);
      return bad(err, errlen, "unknown option %s (see '" PERF_PROG " -h')", argv[optind - 1]);
    }
    int rc = parse_one(ch, optarg, o, err, errlen);
    if (rc != PERF_ARGS_OK) return rc;
  }
  if (optind < argc) return bad(err, errlen, "unexpected argument '%s'", argv[optind]);
  return check_sweep(o, err, errlen);
}

size_t perf_next_size(const struct perf_opts *o, size_t size) {
  if (size >= o->maxbytes) return 0;
  if (o->stepfactor > 1) {
    if (size > o->maxbytes / o->stepfactor) return 0;
    return size * o->stepfactor;
  }
  if (o->stepbytes > o->maxbytes - size) return 0;
  return size + o->stepbytes;
}
