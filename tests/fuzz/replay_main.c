/* Corpus replayer: the main() a fuzz target gets when it is not linked with
 * libFuzzer. Runs every file named on the command line, and every file
 * below every directory named (sorted, hidden files skipped), through
 * LLVMFuzzerTestOneInput once, so `make check` keeps every seed and every
 * crash found so far passing under the ordinary (or sanitizer) build.
 *
 *   fuzz_plan_replay [-v] FILE|DIR...      prints "replayed N inputs" */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A corpus file this big is a mistake (the targets skip anything over
 * 1 MiB); refuse it rather than read it whole. */
#define REPLAY_MAX_FILE (16u << 20)

static const char *current_input;
static int verbose;

/* A crash report is only useful with the input's name: print it from the
 * sanitizer's death callback (ASan/UBSan exit without signals) and from a
 * signal handler (plain builds). */
static void name_current_input(void) {
  if (current_input == NULL) return;
  static const char msg[] = "replay: crashed while running ";
  ssize_t ignored = write(STDERR_FILENO, msg, sizeof(msg) - 1);
  ignored = write(STDERR_FILENO, current_input, strlen(current_input));
  ignored = write(STDERR_FILENO, "\n", 1);
  (void)ignored;
}

static void on_fatal_signal(int sig) {
  name_current_input();
  signal(sig, SIG_DFL);
  raise(sig);
}

void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

static void install_crash_reporting(void) {
  static const int sigs[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
  for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) signal(sigs[i], on_fatal_signal);
  if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(name_current_input);
}

/* Reads the file into a buffer of exactly its size, so a reader that runs
 * past the end of its input trips AddressSanitizer. */
static int read_input(const char *path, uint8_t **data, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || st.st_size < 0 || (uint64_t)st.st_size > REPLAY_MAX_FILE) {
    fprintf(stderr, "replay: %s: cannot size the file or larger than %u bytes\n", path,
            REPLAY_MAX_FILE);
    fclose(f);
    return -1;
  }
  *size = (size_t)st.st_size;
  *data = malloc(*size ? *size : 1);
  int ok = *data != NULL && fread(*data, 1, *size, f) == *size;
  fclose(f);
  if (!ok) {
    fprintf(stderr, "replay: %s: read failed\n", path);
    free(*data);
    return -1;
  }
  return 0;
}

static int replay_file(const char *path, long *count) {
  uint8_t *data;
  size_t size;
  if (read_input(path, &data, &size) != 0) return -1;
  if (verbose) fprintf(stderr, "replay: %s (%zu bytes)\n", path, size);
  current_input = path;
  LLVMFuzzerTestOneInput(data, size);
  current_input = NULL;
  free(data);
  (*count)++;
  return 0;
}

static int replay_path(const char *path, long *count);

static int skip_entry(const struct dirent *e) { return e->d_name[0] != '.'; }

static int replay_dir(const char *dir, long *count) {
  struct dirent **names;
  int n = scandir(dir, &names, skip_entry, alphasort);
  if (n < 0) {
    fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
    return -1;
  }
  int rc = 0;
  for (int i = 0; i < n; i++) {
    size_t len = strlen(dir) + strlen(names[i]->d_name) + 2;
    char *child = malloc(len);
    if (child == NULL) {
      rc = -1;
    } else {
      snprintf(child, len, "%s/%s", dir, names[i]->d_name);
      if (replay_path(child, count) != 0) rc = -1;
      free(child);
    }
    free(names[i]);
  }
  free(names);
  return rc;
}

static int replay_path(const char *path, long *count) {
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
    return -1;
  }
  if (S_ISDIR(st.st_mode)) return replay_dir(path, count);
  if (S_ISREG(st.st_mode)) return replay_file(path, count);
  return 0;  /* sockets, fifos: not inputs */
}

int main(int argc, char **argv) {
  long count = 0;
  int rc = 0, first = 1;
  if (argc > 1 && strcmp(argv[1], "-v") == 0) {
    verbose = 1;
    first = 2;
  }
  if (first >= argc) {
    fprintf(stderr, "usage: %s [-v] FILE|DIR...\n", argv[0]);
    return 2;
  }
  install_crash_reporting();
  for (int i = first; i < argc; i++)
    if (replay_path(argv[i], &count) != 0) rc = 1;
  printf("replayed %ld inputs\n", count);
  return rc;
}
