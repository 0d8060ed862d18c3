/* The switch fabric between nodes, as Slurm describes it in topology.conf
 * (topology/tree: SwitchName=S [Switches=LIST] [Nodes=HOSTLIST]; topology/block:
 * BlockName=B Nodes=HOSTLIST), so a plan can order its nodes the way the
 * network is built: consecutive ring nodes under one leaf switch (or in one
 * block) wherever the allocation allows, each hop crossing as few upper
 * levels as it can.
 *
 * Levels: a leaf switch (one that holds nodes) or a block is level 0, its
 * parent level 1, and so on; blocks hang below one virtual switch. Two nodes
 * cross level L when their lowest common switch is at level L (0: the same
 * leaf). Several top-level switches hang below a virtual one. Nodes the
 * file does not name are outside the fabric: every hop to them counts as
 * crossing the top. */
#ifndef GCOLL_GRAPH_FABRIC_H
#define GCOLL_GRAPH_FABRIC_H

#include <stddef.h>

struct gcoll_fabric;

/* Reads Slurm's topology.conf syntax: one switch or block per line, `#`
 * comments, KEY=VALUE words (keys case-insensitive, as Slurm's); other keys
 * (LinkSpeed, BlockSizes, ...) are ignored. NULL with one line
 * "NAME:LINE: reason" on a malformed file: an unknown switch in Switches=,
 * a switch named twice or under two parents, a cycle, a node under two
 * leaves, tree and block lines mixed. */
struct gcoll_fabric *gcoll_fabric_parse(const char *text, size_t len, const char *name, char *err,
                                        size_t errlen);
struct gcoll_fabric *gcoll_fabric_read_file(const char *path, char *err, size_t errlen);
void gcoll_fabric_free(struct gcoll_fabric *f);

/* Levels above the leaves (a single leaf or block: 1; with the virtual top
 * where there is one). */
int gcoll_fabric_levels(const struct gcoll_fabric *f);

/* The order to visit hosts[0..n) in: a depth-first walk of the switches in
 * the file's order, each leaf's hosts in their order in hosts[]; hosts the
 * fabric does not name come last, in their order. order[] receives indices
 * into hosts[]. 0, or -1 when out of memory. */
int gcoll_fabric_order(const struct gcoll_fabric *f, const char *const *hosts, int n, int *order);

/* topology/block: each host's block (0.. in the file's order; -1 outside
 * every block), a malloc'd array of n; NULL for a tree fabric or when out
 * of memory. Slurm's block plugin describes NVLink racks (GB200 NVL72), so
 * plans take blocks as NVLink domains where NVML names none. */
int *gcoll_fabric_block_domains(const struct gcoll_fabric *f, const char *const *hosts, int n);

/* The level hosts a and b cross (see above); gcoll_fabric_levels(f) when
 * either is outside the fabric. */
int gcoll_fabric_cross_level(const struct gcoll_fabric *f, const char *a, const char *b);

#endif
