/* gcoll-info: what this gcoll build can do and how it is configured, as
 * ompi_info and ucx_info answer for their libraries: version, the optional
 * parts built in, whether a CUDA driver and GPU are usable here, and every
 * GCOLL_* setting (common/params.h) with its value in this environment and
 * where that value came from (a GCOLL_ variable, an NCCL variable or an
 * NCCL configuration file, as the runtime itself would read it). */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "common/params.h"
#include "runtime/settings.h"
#ifdef HAVE_CUDA
#include "kernels/cuda_loader.h"
#endif

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION "(unversioned build)"
#endif

static void usage(FILE *to) {
  fprintf(to,
          "usage: gcoll-info [--params] [--all] [--names]\n"
          "  (no option)  version, optional parts built, CUDA driver and GPUs here, then\n"
          "               the user settings\n"
          "  --params     the settings only\n"
          "  --all        the settings set by launchers and tests too\n"
          "  --names      every setting's name, one per line (for scripts)\n");
}

static const char *yes_no(int built) { return built ? "yes" : "no"; }

static void print_build(void) {
  int cuda = 0, verbs = 0, pmi2 = 0, hwloc = 0;
#ifdef HAVE_CUDA
  cuda = 1;
#endif
#ifdef HAVE_VERBS
  verbs = 1;
#endif
#ifdef HAVE_PMI2
  pmi2 = 1;
#endif
#ifdef HAVE_HWLOC
  hwloc = 1;
#endif
  printf("gcoll %s\n", PACKAGE_VERSION);
  printf("  CUDA executor: %s; net/ib (libibverbs): %s; Slurm PMI2: %s; hwloc detection: %s\n",
         yes_no(cuda), yes_no(verbs), yes_no(pmi2), yes_no(hwloc));
#ifdef HAVE_CUDA
  char msg[256];
  int ndev = 0;
  gcoll_cuda_probe(&ndev, msg, sizeof(msg));
  printf("  CUDA here: %s\n", msg);
#else
  printf("  CUDA here: not built in (configured --without-cuda, or no CUDA toolkit found)\n");
#endif
}

/* One setting: its value here and where that came from, else its default. */
static void print_param(const struct gcoll_param *p) {
  const char *value = gcoll_setting(p->name);
  char from[512] = "";
  if (value != NULL) gcoll_setting_origin(p->name, from, sizeof(from));
  printf("  %-28s %s\n", p->name, p->doc);
  printf("  %-28s   value: %s%s%s\n", "", p->value, p->nccl != NULL ? "; also from " : "",
         p->nccl != NULL ? p->nccl : "");
  if (value != NULL)
    printf("  %-28s   set: %s (from %s)\n", "", value, from[0] != '\0' ? from : p->name);
  else
    printf("  %-28s   unset: %s\n", "", p->fallback);
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {{"params", no_argument, NULL, 'p'},
                                           {"all", no_argument, NULL, 'a'},
                                           {"names", no_argument, NULL, 'n'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  int params_only = 0, all = 0, names = 0, c;
  while ((c = getopt_long(argc, argv, "panh", longopts, NULL)) != -1) {
    switch (c) {
    case 'p': params_only = 1; break;
    case 'a': all = 1; break;
    case 'n': names = 1; break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "gcoll-info: unexpected argument '%s' (see --help)\n", argv[optind]);
    return 2;
  }
  size_t nparams;
  const struct gcoll_param *params = gcoll_param_table(&nparams);
  if (names) {
    for (size_t i = 0; i < nparams; i++) printf("%s\n", params[i].name);
    return 0;
  }
  if (!params_only) {
    print_build();
    printf("\n");
  }
  for (int scope = GCOLL_PARAM_USER; scope <= GCOLL_PARAM_TEST; scope++) {
    if (scope != GCOLL_PARAM_USER && !all) continue;
    printf("%s settings:\n", scope == GCOLL_PARAM_USER       ? "user"
                             : scope == GCOLL_PARAM_LAUNCHER ? "launcher (set per rank by gcollrun "
                                                               "or srun --gcoll=plan)"
                                                             : "test");
    for (size_t i = 0; i < nparams; i++)
      if ((int)params[i].scope == scope) print_param(&params[i]);
  }
  return 0;
}
