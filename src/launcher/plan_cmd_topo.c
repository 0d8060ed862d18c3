/* gcoll-plan topo: print a node topology (detected or read from a file), its
 * path matrix, or its content hash. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launcher/plan_cli.h"
#include "runtime/comm_init_paths.h"
#include "runtime/settings.h"

#define CMD "topo"

const char plan_usage_topo[] =
    "usage: gcoll-plan topo (--detect | --from-nccl FILE.xml | TOPO) [--merge BASE]\n"
    "                       [--paths | --hash | --to-nccl] [-o OUT]\n"
    "\n"
    "Prints a node topology as normalized YAML: the running machine's\n"
    "(--detect: hwloc, NVML/CUDA driver, RDMA devices), an NCCL topology file's\n"
    "(--from-nccl: the XML NCCL_TOPO_FILE names) or TOPO's, where TOPO is a file\n"
    "(gcoll YAML, or NCCL XML: a file starting with '<') or a bare name\n"
    "(dgx-h100) looked up as NAME.yaml in $GCOLL_TOPO_DIR, the installed\n"
    "topology directory, then the source tree's etc/topologies.\n"
    "Save the detected one with  gcoll-plan topo --detect -o mynode.yaml.\n"
    "\n"
    "  -d, --detect          detect this machine's topology, merged with the file\n"
    "                        GCOLL_TOPO_FILE names, else NCCL_TOPO_FILE (environment,\n"
    "                        $NCCL_CONF_FILE, ~/.nccl.conf, /etc/nccl.conf); the\n"
    "                        file wins where both speak (GCOLL_DEBUG=INFO says what\n"
    "                        came from where)\n"
    "  -n, --from-nccl FILE  read NCCL's topology XML (docs/topology-format.md says\n"
    "                        what is mapped); a file that only places devices (a\n"
    "                        cloud's override) converts, but plans refuse it,\n"
    "                        naming what it lacks\n"
    "  -m, --merge BASE      merge the file (an override that only places devices)\n"
    "                        with BASE, a topology file or name (dgx-a100): BASE\n"
    "                        fills in what the file lacks (GPU model, NVLinks, NIC\n"
    "                        names and speeds, core counts); GPUs matched by bus id,\n"
    "                        or in order when the two share none\n"
    "  -t, --to-nccl         print NCCL's topology XML instead (for NCCL_TOPO_FILE);\n"
    "                        gcoll_* attributes keep gcoll's exact values, so it\n"
    "                        reads back as the same topology (same --hash)\n"
    "  -o, --output FILE     write the YAML (or XML) to FILE, atomically, instead of\n"
    "                        stdout\n"
    "  -p, --paths           print the path matrix between GPUs and NICs instead\n"
    "                        (like 'nvidia-smi topo -m'): path type and bottleneck GB/s\n"
    "  -x, --hash            print only the topology's content hash (the 'hash' of\n"
    "                        its class in plans)\n"
    "  -h, --help            this help\n"
    "\n"
    "Exit status: 0 printed, 1 unreadable topology or detection failure, 2 usage.\n";

enum topo_output { TOPO_YAML, TOPO_PATHS, TOPO_HASH, TOPO_NCCL };

/* The devices the matrix shows: GPUs and NICs, or CPUs and NICs on nodes
 * without GPUs so that CPU-only nodes still show where their NICs are. */
static int matrix_devices(const struct gcoll_topo *t, int *dev) {
  int n = 0;
  if (t->ngpu > 0)
    for (int i = 0; i < t->ngpu; i++) dev[n++] = t->gpu[i];
  else
    for (int i = 0; i < t->ncpu; i++) dev[n++] = t->cpu[i];
  for (int i = 0; i < t->nnic; i++) dev[n++] = t->nic[i];
  return n;
}

static void path_cell(const struct gcoll_topo *t, int from, int to, char *buf, size_t len) {
  if (from == to) {
    snprintf(buf, len, "X");
    return;
  }
  const struct gcoll_topo_path *p = gcoll_topo_path(t, from, to);
  if (p == NULL || p->type == GCOLL_PATH_DIS)
    snprintf(buf, len, "DIS");
  else
    snprintf(buf, len, "%s %g", gcoll_path_type_name(p->type), p->bw);
}

static void print_paths(const struct gcoll_topo *t) {
  int *dev = malloc(((size_t)t->ngpu + (size_t)t->ncpu + (size_t)t->nnic + 1) * sizeof(int));
  if (dev == NULL) {
    printf("(out of memory for the path matrix)\n");
    return;
  }
  int n = matrix_devices(t, dev);
  int width = 4;
  char cell[64];
  for (int i = 0; i < n; i++) {
    int w = (int)strlen(t->dev[dev[i]].name);
    if (w > width) width = w;
    for (int j = 0; j < n; j++) {
      path_cell(t, dev[i], dev[j], cell, sizeof(cell));
      if ((int)strlen(cell) > width) width = (int)strlen(cell);
    }
  }
  printf("%-*s", width, "");
  for (int j = 0; j < n; j++) printf("  %-*s", width, t->dev[dev[j]].name);
  printf("\n");
  for (int i = 0; i < n; i++) {
    printf("%-*s", width, t->dev[dev[i]].name);
    for (int j = 0; j < n; j++) {
      path_cell(t, dev[i], dev[j], cell, sizeof(cell));
      printf("  %-*s", width, cell);
    }
    printf("\n");
  }
  free(dev);
  printf("\nEach cell: path type and bottleneck bandwidth (GB/s, one direction).\n"
         "  NVL  NVLink, direct or through NVSwitch\n"
         "  NVB  NVLink through an intermediate GPU\n"
         "  PIX  at most one PCIe switch\n"
         "  PXB  several PCIe switches, no CPU\n"
         "  PHB  through a CPU host bridge\n"
         "  SYS  across CPU sockets (UPI / xGMI)\n"
         "  DIS  disconnected\n");
}

int plan_cmd_topo(int argc, char **argv) {
  static const struct option longopts[] = {{"detect", no_argument, NULL, 'd'},
                                           {"from-nccl", required_argument, NULL, 'n'},
                                           {"output", required_argument, NULL, 'o'},
                                           {"merge", required_argument, NULL, 'm'},
                                           {"to-nccl", no_argument, NULL, 't'},
                                           {"paths", no_argument, NULL, 'p'},
                                           {"hash", no_argument, NULL, 'x'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  int detect = 0;
  const char *nccl = NULL, *out = NULL, *merge = NULL;
  enum topo_output what = TOPO_YAML;
  cli_getopt_reset();
  int c;
  while ((c = getopt_long(argc, argv, ":dn:o:m:tpxh", longopts, NULL)) != -1) {
    switch (c) {
    case 'd': detect = 1; break;
    case 'n': nccl = optarg; break;
    case 'o': out = optarg; break;
    case 'm': merge = optarg; break;
    case 'p':
    case 'x':
    case 't':
      if (what != TOPO_YAML)
        return cli_usage_error(CMD, "--paths, --hash and --to-nccl exclude each other");
      what = c == 'p' ? TOPO_PATHS : c == 'x' ? TOPO_HASH : TOPO_NCCL;
      break;
    case 'h': return cli_print_usage(plan_usage_topo);
    default: return cli_bad_option(CMD, c, argv);
    }
  }
  int nargs = argc - optind;
  if (detect + (nccl != NULL) + (nargs > 0) > 1)
    return cli_usage_error(CMD, "--detect, --from-nccl and a topology file exclude each other");
  if (!detect && nccl == NULL && nargs == 0)
    return cli_usage_error(CMD, "needs --detect, --from-nccl FILE or a topology file");
  if (nargs > 1) return cli_usage_error(CMD, "unexpected argument '%s'", argv[optind + 1]);
  if (merge != NULL && detect)
    return cli_usage_error(CMD, "--merge takes a file's base offline; --detect merges with "
                                "GCOLL_TOPO_FILE / NCCL_TOPO_FILE");
  if (out != NULL && what != TOPO_YAML && what != TOPO_NCCL)
    return cli_usage_error(CMD, "-o writes the YAML or XML; it excludes --paths and --hash");

  char err[PLAN_CLI_ERRLEN];
  struct gcoll_topo *topo;
  char info[2048];
  if (detect) {
    topo = gcoll_detect_this_node(info, sizeof(info), err, sizeof(err));
    if (topo == NULL) return cli_fail("%s", err);
    if (gcoll_log_info_enabled()) fprintf(stderr, "gcoll-plan: %s\n", info);
  } else if (merge != NULL) {
    topo = gcoll_topo_load_merged(nccl != NULL ? nccl : argv[optind], merge, info, sizeof(info),
                                  err, sizeof(err));
    if (topo == NULL) return cli_fail("%s", err);
    if (gcoll_log_info_enabled()) fprintf(stderr, "gcoll-plan: %s\n", info);
  } else if (nccl != NULL) {
    topo = gcoll_topo_read_nccl_xml_file(nccl, err, sizeof(err));
    if (topo == NULL) return cli_fail("%s", err);
  } else {
    topo = gcoll_topo_load_name(argv[optind], err, sizeof(err));
    if (topo == NULL) return cli_fail("%s", err);
  }
  int rc = PLAN_EXIT_OK;
  switch (what) {
  case TOPO_HASH: printf("%08" PRIx32 "\n", gcoll_topo_hash(topo)); break;
  case TOPO_PATHS: print_paths(topo); break;
  case TOPO_NCCL:
    if (out != NULL ? gcoll_topo_write_nccl_xml_file(topo, out, err, sizeof(err)) != 0
                    : gcoll_topo_write_nccl_xml_stream(topo, stdout, err, sizeof(err)) != 0)
      rc = cli_fail("%s", err);
    break;
  case TOPO_YAML:
    if (out != NULL ? gcoll_topo_write_file(topo, out, err, sizeof(err)) != 0
                    : gcoll_topo_write_stream(topo, stdout, err, sizeof(err)) != 0)
      rc = cli_fail("%s", err);
    break;
  }
  gcoll_topo_free(topo);
  return rc;
}
