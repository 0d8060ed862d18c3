/* cuda_probe: what libgcoll's CUDA side sees, for test_cuda_build.sh.
 *   cuda_probe images   one line per image of the embedded fatbin:
 *                       "cubin sm_80 <bytes>" / "ptx compute_90 <bytes>"
 *   cuda_probe driver   the loader's probe line, exit 0 when a GPU is
 *                       usable, 3 no driver, 4 no GPU
 *   cuda_probe exec     tries to create a CUDA executor (1 rank, 1
 *                       channel) and prints its error line; exit 0 when it
 *                       was created, 5 when it failed */
#include <stdio.h>
#include <string.h>

#include "kernels/cuda_exec.h"
#include "kernels/cuda_fatbin.h"
#include "kernels/cuda_loader.h"

static int list_images(void) {
  struct gcoll_fatbin_image img[16];
  char err[256];
  int n = gcoll_fatbin_list(gcoll_cuda_fatbin, gcoll_cuda_fatbin_len, img, 16, err, sizeof(err));
  if (n < 0) {
    fprintf(stderr, "cuda_probe: %s\n", err);
    return 1;
  }
  for (int i = 0; i < n && i < 16; i++) {
    if (img[i].kind == GCOLL_FATBIN_CUBIN)
      printf("cubin sm_%d %llu\n", img[i].arch, (unsigned long long)img[i].bytes);
    else if (img[i].kind == GCOLL_FATBIN_PTX)
      printf("ptx compute_%d %llu\n", img[i].arch, (unsigned long long)img[i].bytes);
    else
      printf("kind%d %d %llu\n", img[i].kind, img[i].arch, (unsigned long long)img[i].bytes);
  }
  return 0;
}

static int probe_driver(void) {
  char msg[256];
  int ndev = 0;
  enum gcoll_cuda_probe_result r = gcoll_cuda_probe(&ndev, msg, sizeof(msg));
  printf("%s\n", msg);
  return r == GCOLL_CUDA_AVAILABLE ? 0 : r == GCOLL_CUDA_NO_DRIVER ? 3 : 4;
}

static int try_exec(void) {
  const int ranks[1] = {0};
  struct gcoll_cuda_exec_channel ch;
  memset(&ch, 0, sizeof(ch));
  ch.ring_ranks = ranks;
  ch.slot_bytes = 4096;
  struct gcoll_cuda_exec_config cfg = {.device = 0, .rank = 0, .nranks = 1, .nchannels = 1,
                                       .channels = &ch, .timeout_ns = 1000000000u};
  char err[256] = "";
  struct gcoll_cuda_exec *e = gcoll_cuda_exec_create(&cfg, err, sizeof(err));
  if (e == NULL) {
    printf("%s\n", err);
    return 5;
  }
  printf("created\n");
  gcoll_cuda_exec_destroy(e);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "images") == 0) return list_images();
  if (argc == 2 && strcmp(argv[1], "driver") == 0) return probe_driver();
  if (argc == 2 && strcmp(argv[1], "exec") == 0) return try_exec();
  fprintf(stderr, "usage: cuda_probe images|driver|exec\n");
  return 2;
}
