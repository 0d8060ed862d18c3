/* Shared-memory segments of this user only (runtime/shm_segment.h): a
 * created segment is 0600 and exclusive, an opener maps only its own
 * user's 0600 segment of the announced size and leaves anything else
 * linked, and a name that is gone says so. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "runtime/shm_segment.h"
#include "runtime/transport.h"

static void fresh_name(char name[GCOLL_SHM_NAME_MAX]) {
  char err[256];
  assert_int_equal(gcoll_shm_random_name(name, err, sizeof(err)), 0);
}

static int exists(const char *name) {
  int fd = shm_open(name, O_RDONLY, 0);
  if (fd >= 0) close(fd);
  return fd >= 0;
}

/* Creates name as another process of some user might: mode and size given. */
static int plant(const char *name, mode_t mode, off_t bytes) {
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return -1;
  int rc = fchmod(fd, mode) == 0 && ftruncate(fd, bytes) == 0 ? fd : -1;
  if (rc < 0) close(fd);
  return rc;
}

static void test_create_attach(void **state) {
  (void)state;
  char name[GCOLL_SHM_NAME_MAX], err[512];
  fresh_name(name);
  char *a = gcoll_shm_create(name, 8192, err, sizeof(err));
  assert_non_null(a);
  struct stat st;
  int fd = shm_open(name, O_RDONLY, 0);
  assert_true(fd >= 0);
  assert_int_equal(fstat(fd, &st), 0);
  close(fd);
  assert_int_equal(st.st_mode & 07777, 0600);
  assert_int_equal(st.st_size, 8192);
  /* The name is exclusive. */
  assert_null(gcoll_shm_create(name, 8192, err, sizeof(err)));
  assert_non_null(strstr(err, "File exists"));
  int gone = -1;
  char *b = gcoll_shm_attach(name, 8192, 1, "the creator", &gone, err, sizeof(err));
  assert_non_null(b);
  assert_int_equal(gone, 0);
  a[4000] = 42;
  assert_int_equal(b[4000], 42); /* the same memory */
  assert_false(exists(name));   /* unlink_name removed it */
  munmap(a, 8192);
  munmap(b, 8192);
}

static void test_refusals(void **state) {
  (void)state;
  char name[GCOLL_SHM_NAME_MAX], err[512];
  int gone = -1;
  /* Gone: the creator closed or died. */
  fresh_name(name);
  assert_null(gcoll_shm_attach(name, 4096, 1, "rank 0", &gone, err, sizeof(err)));
  assert_int_equal(gone, 1);
  assert_non_null(strstr(err, "did rank 0 close or die?"));
  /* Readable by others: not a segment gcoll made; left linked. */
  fresh_name(name);
  int fd = plant(name, 0644, 4096);
  assert_true(fd >= 0);
  assert_null(gcoll_shm_attach(name, 4096, 1, "rank 0", &gone, err, sizeof(err)));
  assert_int_equal(gone, 0);
  assert_non_null(strstr(err, "refusing a segment another user planted"));
  assert_true(exists(name));
  /* Another user's (root can give it away): refused, left linked. */
  if (geteuid() == 0) {
    assert_int_equal(fchmod(fd, 0600), 0);
    assert_int_equal(fchown(fd, 65534, 65534), 0);
    assert_null(gcoll_shm_attach(name, 4096, 1, "rank 0", &gone, err, sizeof(err)));
    assert_non_null(strstr(err, "owned by uid 65534"));
    assert_true(exists(name));
  } else {
    printf("skipped: a segment of another user (not root)\n");
  }
  close(fd);
  shm_unlink(name);
  /* Ours, but not the announced size. */
  fresh_name(name);
  fd = plant(name, 0600, 4096);
  assert_true(fd >= 0);
  close(fd);
  assert_null(gcoll_shm_attach(name, 8192, 0, "rank 0", &gone, err, sizeof(err)));
  assert_non_null(strstr(err, "has 4096 bytes, expected 8192"));
  assert_true(exists(name)); /* unlink_name 0: the caller decides */
  shm_unlink(name);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_create_attach),
      cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
