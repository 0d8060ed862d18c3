/* Which address this host listens on for other hosts: the rules the TCP
 * transports, the bootstrap stores and the launchers share
 * (GCOLL_SOCKET_IFADDR, else GCOLL_SOCKET_IFNAME's list, else NCCL's
 * default choice, else loopback). Pure functions of the values given, so
 * that a caller reading another process's environment (the SPANK plugin in
 * slurmstepd reads the job's, not its own) applies the same rules;
 * runtime/net_tcp.h reads them from the settings. */
#ifndef GCOLL_COMMON_NETADDR_H
#define GCOLL_COMMON_NETADDR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct gcoll_tcp_endpoint {
  int family;
  unsigned char ip[16];
  uint16_t port;
};

/* Whether an interface name passes an NCCL_SOCKET_IFNAME-style list
 * ("eth,ib" prefixes, "=eth0" exact names, "^docker,lo" excluded, ":port"
 * suffixes ignored): 1 yes, 0 no, -1 when the list names nothing (with one
 * line in err). *included is set to whether the list names interfaces to
 * use (1) or to avoid (0). */
int gcoll_ifname_match(const char *spec, const char *ifname, int *included, char *err,
                       size_t errlen);

struct ifaddrs;
/* The address other hosts most likely reach us at, as NCCL picks its
 * socket interface: up, not loopback, not a container or VM bridge
 * (docker*, virbr*, veth*, cni*, podman*, lxcbr*), no IPv6 link-local;
 * IPoIB (ib*) before others, IPv4 before IPv6, then list order. 0 with
 * the address (and the interface's name when name is not NULL), -1 when
 * the list has none. */
int gcoll_tcp_choose_interface(const struct ifaddrs *list, struct gcoll_tcp_endpoint *ep,
                               char *name, size_t namelen);

/* As NCCL_SOCKET_IFNAME chooses: the interfaces spec lists (prefixes,
 * "=name" exact names, "^..." all but those; gcoll_ifname_match) that are
 * up with an IPv4 or a global IPv6 address, loopback and bridges included;
 * IPv4 before IPv6, loopback and bridges after others unless the list
 * names what to use, then list order. 0 with the address (and name), -1
 * with one line in err when none matches or spec names nothing. */
int gcoll_tcp_choose_listed(const struct ifaddrs *list, const char *spec,
                            struct gcoll_tcp_endpoint *ep, char *name, size_t namelen, char *err,
                            size_t errlen);

/* The address to listen on: ifaddr (GCOLL_SOCKET_IFADDR: a numeric IPv4
 * or IPv6 address or an interface name, its IPv4 address, else its IPv6
 * one) when not NULL; else gcoll_tcp_choose_listed over this host's
 * interfaces when ifname (GCOLL_SOCKET_IFNAME) is not NULL, its errors
 * prefixed with ifname_from (where the list came from); else
 * gcoll_tcp_choose_interface; else 127.0.0.1. Port 0. -1 with one line in
 * err when a setting names nothing usable or the unspecified address. */
int gcoll_netaddr_pick(const char *ifaddr, const char *ifname, const char *ifname_from,
                       struct gcoll_tcp_endpoint *ep, char *err, size_t errlen);

/* ep as a socket address (port included); its length. */
socklen_t gcoll_tcp_sockaddr(const struct gcoll_tcp_endpoint *ep, struct sockaddr_storage *ss);

/* "ip:port" (IPv6 as "[ip]:port") for error messages. */
void gcoll_tcp_format(const struct gcoll_tcp_endpoint *ep, char *buf, size_t len);

/* A non-blocking, close-on-exec listening socket on ep's address and an
 * ephemeral port, which it stores in ep->port; the fd, or -1 with one line
 * in err. The runtime's listeners and the SPANK plugin's per-task
 * rendezvous sockets are made here. */
int gcoll_tcp_listen(struct gcoll_tcp_endpoint *ep, char *err, size_t errlen);

#endif
