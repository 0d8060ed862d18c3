/* gcoll settings with NCCL's as fallback (see settings.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* getpwuid_r */
#endif
#include "runtime/settings.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph/yaml_doc.h"
#include "kernels/fifo.h"

/* What comm_init.c accepts for GCOLL_SLOT_BYTES (a subset of what
 * gcoll_fifo_slot_bytes_valid allows). */
#define SLOT_MIN 4096L
#define SLOT_MAX (16L << 20)
/* NCCL copies at most this much of a file's value (param.cc). */
#define VALUE_MAX 1023

/* ---- translations --------------------------------------------------------- */

/* Each turns an NCCL value into gcoll's: 1 with the value in out, or 0 when
 * the NCCL value means nothing gcoll can honour (the setting stays unset);
 * note says why, or adds what the reader should know, or is left empty. */
typedef int (*translate_fn)(const char *raw, char *out, size_t outlen, char *note,
                            size_t notelen);

static int parse_ll(const char *s, long long *v) {
  char *end;
  errno = 0;
  *v = strtoll(s, &end, 0);
  return end != s && *end == '\0' && errno == 0 ? 0 : -1;
}

/* NCCL_ALGO and NCCL_PROTO: "A,B" allows A and B, "^A,B" all but them; per
 * collective lists ("allreduce:tree;broadcast:ring", NCCL 2.24) are not
 * taken apart. gcoll can force one of its two choices or leave it to the
 * plan, so a list is honoured when it leaves exactly one of them. */
static int translate_list(const char *raw, const char *const gcoll[2], const char *const *nccl,
                          const char *what, char *out, size_t outlen, char *note, size_t notelen) {
  if (strpbrk(raw, ":;") != NULL) {
    snprintf(note, notelen, "per-collective %s lists are not honoured", what);
    return 0;
  }
  int exclude = raw[0] == '^';
  unsigned named = 0;
  for (const char *p = raw + exclude; *p != '\0';) {
    size_t n = strcspn(p, ",");
    char tok[32];
    size_t b = 0, e = n;
    while (b < e && isspace((unsigned char)p[b])) b++;
    while (e > b && isspace((unsigned char)p[e - 1])) e--;
    if (e > b) {
      if (e - b >= sizeof(tok)) {
        snprintf(note, notelen, "'%.32s...' is not an NCCL %s", p + b, what);
        return 0;
      }
      memcpy(tok, p + b, e - b);
      tok[e - b] = '\0';
      int known = 0;
      for (int k = 0; k < 2; k++)
        if (strcasecmp(tok, gcoll[k]) == 0) named |= 1u << k, known = 1;
      for (const char *const *q = nccl; *q != NULL && !known; q++)
        if (strcasecmp(tok, *q) == 0) known = 1;
      if (!known) {
        snprintf(note, notelen, "'%s' is not an NCCL %s", tok, what);
        return 0;
      }
    }
    p += n;
    if (*p == ',') p++;
  }
  unsigned allowed = exclude ? ~named & 3u : named;
  if (allowed == 1 || allowed == 2) {
    snprintf(out, outlen, "%s", gcoll[allowed == 1 ? 0 : 1]);
    return 1;
  }
  if (allowed == 3)
    snprintf(note, notelen, "it allows both %s and %s, which the plan already chooses between",
             gcoll[0], gcoll[1]);
  else
    snprintf(note, notelen, "it leaves no %s gcoll has (only %s and %s)", what, gcoll[0],
             gcoll[1]);
  return 0;
}

static int tr_algo(const char *raw, char *out, size_t outlen, char *note, size_t notelen) {
  static const char *const gcoll[2] = {"ring", "tree"};
  static const char *const nccl[] = {"collnetdirect", "collnetchain", "collnet", "nvls",
                                     "nvlstree", "pat", NULL};
  return translate_list(raw, gcoll, nccl, "algorithm", out, outlen, note, notelen);
}

static int tr_proto(const char *raw, char *out, size_t outlen, char *note, size_t notelen) {
  static const char *const gcoll[2] = {"simple", "ll"};
  static const char *const nccl[] = {"ll128", NULL};
  return translate_list(raw, gcoll, nccl, "protocol", out, outlen, note, notelen);
}

/* gcoll logs at INFO and TRACE (the same lines) and is silent otherwise. */
static int tr_debug(const char *raw, char *out, size_t outlen, char *note, size_t notelen) {
  static const char *const levels[] = {"VERSION", "WARN", "INFO", "TRACE", "ABORT", "NONE",
                                       "ERROR"};
  for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++)
    if (strcasecmp(raw, levels[i]) == 0) {
      snprintf(out, outlen, "%s", levels[i]);
      return 1;
    }
  snprintf(note, notelen, "not an NCCL debug level");
  return 0;
}

/* NCCL's buffer holds all GCOLL_STEPS steps; gcoll's setting is one slot. */
static int tr_buffsize(const char *raw, char *out, size_t outlen, char *note, size_t notelen) {
  long long v;
  if (parse_ll(raw, &v) != 0 || v <= 0) {
    snprintf(note, notelen, "not a positive number of bytes");
    return 0;
  }
  long long slot = v / GCOLL_STEPS / GCOLL_FIFO_ALIGN * GCOLL_FIFO_ALIGN;
  if (slot < SLOT_MIN || slot > SLOT_MAX) {
    long long clamped = slot < SLOT_MIN ? SLOT_MIN : SLOT_MAX;
    snprintf(note, notelen, "1/%d of it is %lld, outside gcoll's %ld..%ld", GCOLL_STEPS,
             v / GCOLL_STEPS, SLOT_MIN, SLOT_MAX);
    slot = clamped;
  } else {
    snprintf(note, notelen, "one of its %d steps", GCOLL_STEPS);
  }
  snprintf(out, outlen, "%lld", slot);
  return 1;
}

/* NCCL's channels (CTAs) are GPU blocks, which are what gcoll's device
 * collectives run on: a count bounds them (the host's worker threads are
 * GCOLL_MAX_NCHANNELS's). */
static int tr_gpu_channels(const char *raw, char *out, size_t outlen, char *note,
                           size_t notelen) {
  long long v;
  if (parse_ll(raw, &v) != 0 || v < 1 || v > 1024) {
    snprintf(note, notelen, "not a channel count 1..1024");
    return 0;
  }
  snprintf(out, outlen, "%lld", v);
  snprintf(note, notelen, "bounds the GPU blocks of device collectives (not host threads)");
  return 1;
}

static int tr_flag(const char *raw, char *out, size_t outlen, char *note, size_t notelen) {
  long long v;
  if (parse_ll(raw, &v) != 0) {
    snprintf(note, notelen, "not an integer");
    return 0;
  }
  snprintf(out, outlen, "%d", v != 0);
  return 1;
}

/* NCCL_P2P_LEVEL=LOC (or its legacy 0) never uses P2P; gcoll has no
 * distance cutoff for the others. */
static int tr_p2p_level(const char *raw, char *out, size_t outlen, char *note, size_t notelen) {
  if (strcasecmp(raw, "LOC") == 0 || strcmp(raw, "0") == 0) {
    snprintf(out, outlen, "1");
    return 1;
  }
  snprintf(note, notelen, "gcoll has no P2P distance cutoff: p2p serves every GPU edge of a "
                          "node, or none with LOC");
  return 0;
}

/* Only "disable" maps: a 0 leaves net/ib as gcoll picks it, and so leaves
 * the question to NCCL_NET. */
static int tr_ib_disable(const char *raw, char *out, size_t outlen, char *note, size_t notelen) {
  long long v;
  if (parse_ll(raw, &v) != 0) {
    snprintf(note, notelen, "not an integer");
    return 0;
  }
  if (v == 0) {
    snprintf(note, notelen, "net/ib stays as gcoll picks it");
    return 0;
  }
  snprintf(out, outlen, "1");
  snprintf(note, notelen, "cross-node edges use net/socket");
  return 1;
}

static int tr_net(const char *raw, char *out, size_t outlen, char *note, size_t notelen) {
  if (strcasecmp(raw, "Socket") == 0) {
    snprintf(out, outlen, "1");
    snprintf(note, notelen, "cross-node edges use net/socket");
    return 1;
  }
  if (strcasecmp(raw, "IB") == 0)
    snprintf(note, notelen, "gcoll uses net/ib across nodes when a device opens, else "
                            "net/socket; set GCOLL_TRANSPORT=net/ib to require it");
  else
    snprintf(note, notelen, "a plugin's network: net/plugin serves it when the NCCL net plugin "
                            "loaded (NCCL_NET_PLUGIN) has that name, else the init fails");
  return 0;
}

/* "[^][=]dev[:port][,...]": gcoll opens one device, named exactly, so the
 * first entry is taken; an exclusion list cannot be expressed. */
static int tr_ib_hca(const char *raw, char *out, size_t outlen, char *note, size_t notelen) {
  if (raw[0] == '^') {
    snprintf(note, notelen, "gcoll cannot exclude devices (it opens the first with an active "
                            "port, or the one GCOLL_IB_HCA names)");
    return 0;
  }
  const char *p = raw + (raw[0] == '=');
  size_t n = strcspn(p, ","), dev = strcspn(p, ":,");
  if (dev == 0 || dev >= 64) {
    snprintf(note, notelen, "no device name in the first entry");
    return 0;
  }
  char port[8] = "";
  if (dev < n) {
    size_t plen = strcspn(p + dev + 1, ":,");
    char *end;
    unsigned long v = plen > 0 && plen < 4 ? strtoul(p + dev + 1, &end, 10) : 0;
    if (v >= 1 && v <= 255 && end == p + dev + 1 + plen) snprintf(port, sizeof(port), ":%lu", v);
  }
  snprintf(out, outlen, "%.*s%s", (int)dev, p, port);
  snprintf(note, notelen, "%sthe device must be named exactly", p[n] == ',' ?
           "only the first entry; " : "");
  return 1;
}

static int tr_gid_index(const char *raw, char *out, size_t outlen, char *note, size_t notelen) {
  long long v;
  if (parse_ll(raw, &v) != 0 || v < -1 || v > 255) {
    snprintf(note, notelen, "not -1 or a GID index 0..255");
    return 0;
  }
  if (v == -1) {
    snprintf(note, notelen, "-1 asks for the automatic choice, gcoll's default");
    return 0;
  }
  snprintf(out, outlen, "%lld", v);
  return 1;
}

static int tr_ifname(const char *raw, char *out, size_t outlen, char *note, size_t notelen) {
  int included;
  if (gcoll_ifname_match(raw, "", &included, note, notelen) < 0) return 0;
  snprintf(out, outlen, "%s", raw);
  return 1;
}

/* NCCL_TOPO_FILE: a path, taken as is (relative to where the process runs,
 * as NCCL opens it); one that cannot be read is an error where it is used,
 * never skipped. */
static int tr_path(const char *raw, char *out, size_t outlen, char *note, size_t notelen) {
  if (strpbrk(raw, "\n\r") != NULL) {
    snprintf(note, notelen, "not a path");
    return 0;
  }
  snprintf(out, outlen, "%s", raw);
  return 1;
}

struct mapping {
  const char *gcoll;
  const char *nccl;
  translate_fn translate;
};

/* In precedence order where two NCCL variables give one gcoll setting. */
static const struct mapping mappings[] = {
    {"GCOLL_ALGO", "NCCL_ALGO", tr_algo},
    {"GCOLL_PROTO", "NCCL_PROTO", tr_proto},
    {"GCOLL_DEBUG", "NCCL_DEBUG", tr_debug},
    {"GCOLL_SLOT_BYTES", "NCCL_BUFFSIZE", tr_buffsize},
    {"GCOLL_P2P_DISABLE", "NCCL_P2P_DISABLE", tr_flag},
    {"GCOLL_P2P_DISABLE", "NCCL_P2P_LEVEL", tr_p2p_level},
    {"GCOLL_IB_HCA", "NCCL_IB_HCA", tr_ib_hca},
    {"GCOLL_IB_GID_INDEX", "NCCL_IB_GID_INDEX", tr_gid_index},
    {"GCOLL_IB_DISABLE", "NCCL_IB_DISABLE", tr_ib_disable},
    {"GCOLL_IB_DISABLE", "NCCL_NET", tr_net},
    {"GCOLL_NET", "NCCL_NET", tr_path},
    {"GCOLL_NET_PLUGIN", "NCCL_NET_PLUGIN", tr_path},
    {"GCOLL_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", tr_ifname},
    {"GCOLL_MAX_GPU_CHANNELS", "NCCL_MAX_CTAS", tr_gpu_channels},
    {"GCOLL_MAX_GPU_CHANNELS", "NCCL_MAX_NCHANNELS", tr_gpu_channels},
    {"GCOLL_MIN_GPU_CHANNELS", "NCCL_MIN_CTAS", tr_gpu_channels},
    {"GCOLL_MIN_GPU_CHANNELS", "NCCL_MIN_NCHANNELS", tr_gpu_channels},
    {"GCOLL_TOPO_FILE", "NCCL_TOPO_FILE", tr_path},
};
#define NMAPPINGS (sizeof(mappings) / sizeof(mappings[0]))

/* ---- process-lifetime strings ------------------------------------------------ */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

struct interned {
  struct interned *next;
  char s[];
};
static struct interned *interned;

/* A copy that lives as long as the process, shared by equal strings (the
 * values a process sees are few). NULL when out of memory. */
static const char *intern(const char *s) {
  pthread_mutex_lock(&lock);
  struct interned *i = interned;
  while (i != NULL && strcmp(i->s, s) != 0) i = i->next;
  if (i == NULL && (i = malloc(sizeof(*i) + strlen(s) + 1)) != NULL) {
    strcpy(i->s, s);
    i->next = interned;
    interned = i;
  }
  pthread_mutex_unlock(&lock);
  return i != NULL ? i->s : NULL;
}

/* ---- configuration files ------------------------------------------------------ */

enum { FILE_USER, FILE_SYSTEM, NFILES };

struct file_value {
  const char *value; /* interned; NULL when the file has no line for it */
  const char *path;
  int line;
};

static pthread_once_t files_once = PTHREAD_ONCE_INIT;
static const char *system_conf = "/etc/nccl.conf";
static struct file_value file_values[NFILES][NMAPPINGS];
static char file_notes[NFILES][512]; /* why a file that exists was not read */
static int file_notes_logged;
static int logged[NMAPPINGS];

static void trim(const char **b, const char **e) {
  while (*b < *e && isspace((unsigned char)**b)) (*b)++;
  while (*e > *b && isspace((unsigned char)(*e)[-1])) (*e)--;
}

/* KEY=VALUE lines; the first line for a key wins, as NCCL never overwrites
 * a variable it already set. */
static void parse_conf(int which, const char *path, const char *buf, size_t len) {
  int line = 0;
  for (const char *p = buf, *end = buf + len; p < end;) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *b = p, *e = nl != NULL ? nl : end;
    p = nl != NULL ? nl + 1 : end;
    line++;
    if (memchr(b, '\0', (size_t)(e - b)) != NULL) continue;
    trim(&b, &e);
    if (b == e || *b == '#') continue;
    const char *eq = memchr(b, '=', (size_t)(e - b));
    if (eq == NULL) continue;
    const char *kb = b, *ke = eq, *vb = eq + 1, *ve = e;
    trim(&kb, &ke);
    trim(&vb, &ve);
    if (ke == kb || vb == ve || ve - vb > VALUE_MAX) continue;
    for (size_t m = 0; m < NMAPPINGS; m++) {
      const char *name = mappings[m].nccl;
      if ((size_t)(ke - kb) != strlen(name) || memcmp(kb, name, (size_t)(ke - kb)) != 0 ||
          file_values[which][m].value != NULL)
        continue;
      char value[VALUE_MAX + 1];
      memcpy(value, vb, (size_t)(ve - vb));
      value[ve - vb] = '\0';
      file_values[which][m].value = intern(value);
      file_values[which][m].path = intern(path);
      file_values[which][m].line = line;
    }
  }
}

static void read_conf(int which, const char *path) {
  char *buf = NULL, err[sizeof(file_notes[0])];
  size_t len = 0;
  if (gcoll_read_file(path, GCOLL_SETTINGS_FILE_MAX, &buf, &len, err, sizeof(err)) != 0) {
    /* A missing file is the usual case, not worth a line. */
    if (access(path, F_OK) == 0 || errno != ENOENT)
      snprintf(file_notes[which], sizeof(file_notes[which]), "%s", err);
    return;
  }
  parse_conf(which, path, buf, len);
  free(buf);
}

static const char *home_dir(char *buf, size_t len) {
  const char *home = getenv("HOME");
  if (home != NULL && *home != '\0') return home;
  struct passwd pw, *res = NULL;
  if (getpwuid_r(getuid(), &pw, buf, len, &res) != 0 || res == NULL || res->pw_dir == NULL)
    return NULL;
  return res->pw_dir;
}

static void load_files(void) {
  char path[4096], pwbuf[4096];
  const char *user = getenv("NCCL_CONF_FILE");
  if (user != NULL && *user != '\0') {
    read_conf(FILE_USER, user);
  } else {
    const char *home = home_dir(pwbuf, sizeof(pwbuf));
    if (home != NULL && (size_t)snprintf(path, sizeof(path), "%s/.nccl.conf", home) < sizeof(path))
      read_conf(FILE_USER, path);
  }
  read_conf(FILE_SYSTEM, system_conf);
}

void gcoll_settings_reset_for_test(const char *conf) {
  pthread_once_t fresh = PTHREAD_ONCE_INIT;
  files_once = fresh;
  system_conf = conf != NULL ? intern(conf) : "/etc/nccl.conf";
  memset(file_values, 0, sizeof(file_values));
  memset(file_notes, 0, sizeof(file_notes));
  memset(logged, 0, sizeof(logged));
  file_notes_logged = 0;
}

/* ---- resolution ---------------------------------------------------------------- */

struct resolved {
  const char *value;     /* NULL: unset */
  int mapping;           /* the NCCL variable that gave it; -1: GCOLL_* or unset */
  const char *raw;       /* its NCCL value */
  const char *path;      /* its file; NULL: the environment */
  int line;
};

/* Where mapping m's NCCL variable is set, if anywhere: 0 and *r filled. */
static int nccl_source(size_t m, struct resolved *r) {
  const char *env = getenv(mappings[m].nccl);
  r->mapping = (int)m;
  r->path = NULL;
  r->line = 0;
  if (env != NULL && *env != '\0') {
    r->raw = env;
    return 0;
  }
  for (int f = 0; f < NFILES; f++)
    if (file_values[f][m].value != NULL) {
      r->raw = file_values[f][m].value;
      r->path = file_values[f][m].path;
      r->line = file_values[f][m].line;
      return 0;
    }
  return -1;
}

static void describe(const struct resolved *r, char *buf, size_t len) {
  if (r->path == NULL)
    snprintf(buf, len, "%s=%.256s (environment)", mappings[r->mapping].nccl, r->raw);
  else
    snprintf(buf, len, "%s=%.256s (%s:%d)", mappings[r->mapping].nccl, r->raw, r->path, r->line);
}

static int debug_on(void);

/* Logs once per mapping per process what became of its NCCL value. */
static void log_once(const struct resolved *r, const char *outcome) {
  if (!debug_on()) return;
  pthread_mutex_lock(&lock);
  int first = !logged[r->mapping];
  logged[r->mapping] = 1;
  pthread_mutex_unlock(&lock);
  if (!first) return;
  char from[512];
  describe(r, from, sizeof(from));
  fprintf(stderr, "gcoll pid %d: %s %s\n", (int)getpid(), from, outcome);
}

static void resolve(const char *name, struct resolved *out, int log) {
  pthread_once(&files_once, load_files);
  memset(out, 0, sizeof(*out));
  out->mapping = -1;
  const char *own = getenv(name);
  int own_set = own != NULL && *own != '\0';
  for (size_t m = 0; m < NMAPPINGS; m++) {
    struct resolved r;
    if (strcmp(mappings[m].gcoll, name) != 0 || nccl_source(m, &r) != 0) continue;
    char value[VALUE_MAX + 1], note[256] = "", outcome[512];
    if (own_set) {
      if (log) {
        snprintf(outcome, sizeof(outcome), "ignored: %s is set", name);
        log_once(&r, outcome);
      }
      continue;
    }
    if (strlen(r.raw) > VALUE_MAX) {
      snprintf(note, sizeof(note), "longer than %d characters", VALUE_MAX);
    } else if (mappings[m].translate(r.raw, value, sizeof(value), note, sizeof(note)) == 1) {
      const char *v = intern(value);
      if (v != NULL) {
        *out = r;
        out->value = v;
        if (log) {
          snprintf(outcome, sizeof(outcome), "gives %s=%s%s%s%s", name, v, *note ? " (" : "",
                   note, *note ? ")" : "");
          log_once(&r, outcome);
        }
        return;
      }
    }
    if (log) {
      snprintf(outcome, sizeof(outcome), "ignored: %s", *note ? note : "out of memory");
      log_once(&r, outcome);
    }
  }
  if (own_set) out->value = own;
}

static int debug_on(void) {
  struct resolved r;
  resolve("GCOLL_DEBUG", &r, 0);
  return r.value != NULL && (strcmp(r.value, "INFO") == 0 || strcmp(r.value, "TRACE") == 0);
}

static void log_file_notes(void) {
  pthread_mutex_lock(&lock);
  int first = !file_notes_logged;
  file_notes_logged = 1;
  pthread_mutex_unlock(&lock);
  if (!first || !debug_on()) return;
  for (int f = 0; f < NFILES; f++)
    if (file_notes[f][0] != '\0')
      fprintf(stderr, "gcoll pid %d: NCCL configuration file not read: %s\n", (int)getpid(),
              file_notes[f]);
}

const char *gcoll_setting(const char *gcoll_name) {
  struct resolved r;
  resolve(gcoll_name, &r, 1);
  log_file_notes();
  return r.value;
}

void gcoll_setting_origin(const char *gcoll_name, char *buf, size_t len) {
  struct resolved r;
  resolve(gcoll_name, &r, 0);
  if (r.value == NULL)
    snprintf(buf, len, "%s", "");
  else if (r.mapping < 0)
    snprintf(buf, len, "%s", gcoll_name);
  else
    describe(&r, buf, len);
}

int gcoll_setting_long(const char *gcoll_name, long min, long max, long *out, char *err,
                       size_t errlen) {
  const char *v = gcoll_setting(gcoll_name);
  if (v == NULL) return 1;
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (end == v || *end != '\0' || errno != 0 || x < min || x > max) {
    char from[512];
    gcoll_setting_origin(gcoll_name, from, sizeof(from));
    snprintf(err, errlen, "%s%s'%.64s' is not an integer in %ld..%ld", from,
             strchr(from, '=') != NULL ? " gives " : "=", v, min, max);
    return -1;
  }
  *out = x;
  return 0;
}

/* ---- interface lists ------------------------------------------------------------- */


int gcoll_log_info_enabled(void) {
  const char *level = gcoll_setting("GCOLL_DEBUG");
  return level != NULL && (strcmp(level, "INFO") == 0 || strcmp(level, "TRACE") == 0);
}
