/* libnccl.so.2's host half of NCCL 2.28's device API (nccl_devapi.c): the
 * teams are arithmetic on the communicator and must be exact; everything
 * that would create device-API resources must fail with ncclInvalidUsage
 * and a last-error line that says why. PyTorch's libtorch_cuda.so links
 * these symbols, so they must exist and must not pretend to work. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "nccl/nccl_shim.h"

typedef struct {
  int nRanks, rank, stride;
} team_t;

team_t ncclTeamWorld(struct ncclComm *comm);
team_t ncclTeamLsa(struct ncclComm *comm);
team_t ncclTeamRail(struct ncclComm *comm);
int ncclTeamRankToWorld(struct ncclComm *comm, team_t team, int rank);
int ncclTeamRankToLsa(struct ncclComm *comm, team_t team, int rank);
nccl_abi_result_t ncclDevCommCreate(struct ncclComm *comm, const void *reqs, void *out);
nccl_abi_result_t ncclDevCommDestroy(struct ncclComm *comm, const void *devcomm);
nccl_abi_result_t ncclLsaBarrierCreateRequirement(team_t team, int n, void *out, void *req);
nccl_abi_result_t ncclGinBarrierCreateRequirement(struct ncclComm *comm, team_t team, int n,
                                                  void *out, void *req);
nccl_abi_result_t ncclLLA2ACreateRequirement(int nblocks, int nslots, void *out, void *req);
int ncclLLA2ACalcSlots(int max_elts, int max_elt_size);

#define NR 3
#define NCCL_INVALID_USAGE 5

static void test_teams(void **state) {
  (void)state;
  struct ncclComm *comms[NR];
  assert_int_equal(ncclCommInitAll(comms, NR, NULL), 0);
  for (int r = 0; r < NR; r++) {
    team_t w = ncclTeamWorld(comms[r]);
    assert_int_equal(w.nRanks, NR);
    assert_int_equal(w.rank, r);
    assert_int_equal(w.stride, 1);
    team_t rail = ncclTeamRail(comms[r]);
    assert_memory_equal(&rail, &w, sizeof(w));
    team_t lsa = ncclTeamLsa(comms[r]);
    assert_int_equal(lsa.nRanks, 1);
    assert_int_equal(lsa.rank, 0);
    for (int k = 0; k < NR; k++) {
      assert_int_equal(ncclTeamRankToWorld(comms[r], w, k), k);
      /* Only this rank is in its LSA team, at index 0. */
      assert_int_equal(ncclTeamRankToLsa(comms[r], w, k), k - r);
    }
    assert_int_equal(ncclTeamRankToWorld(comms[r], lsa, 0), r);
  }
  team_t none = ncclTeamWorld(NULL);
  assert_int_equal(none.nRanks, 0);
  assert_int_equal(ncclTeamRankToWorld(NULL, none, 0), -1);
  for (int r = 0; r < NR; r++) assert_int_equal(ncclCommDestroy(comms[r]), 0);
}

static void expect_refused(nccl_abi_result_t rc, const char *fn) {
  assert_int_equal(rc, NCCL_INVALID_USAGE);
  const char *msg = ncclGetLastError(NULL);
  assert_non_null(strstr(msg, fn));
  assert_non_null(strstr(msg, "does not implement NCCL's device API"));
}

static void test_device_api_refused(void **state) {
  (void)state;
  struct ncclComm *comm;
  assert_int_equal(ncclCommInitAll(&comm, 1, NULL), 0);
  char reqs[256] = {0}, out[4096] = {0}, zero[4096] = {0};
  team_t w = ncclTeamWorld(comm);
  expect_refused(ncclDevCommCreate(comm, reqs, out), "ncclDevCommCreate");
  assert_memory_equal(out, zero, sizeof(out)); /* nothing written to the caller's struct */
  expect_refused(ncclDevCommDestroy(comm, out), "ncclDevCommDestroy");
  expect_refused(ncclLsaBarrierCreateRequirement(w, 1, out, reqs), "ncclLsaBarrierCreateRequirement");
  expect_refused(ncclGinBarrierCreateRequirement(comm, w, 1, out, reqs),
                 "ncclGinBarrierCreateRequirement");
  expect_refused(ncclLLA2ACreateRequirement(1, 1, out, reqs), "ncclLLA2ACreateRequirement");
  assert_int_equal(ncclLLA2ACalcSlots(1024, 8), 0);
  assert_non_null(strstr(ncclGetLastError(NULL), "ncclLLA2ACalcSlots"));
  assert_int_equal(ncclCommDestroy(comm), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_teams),
      cmocka_unit_test(test_device_api_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
