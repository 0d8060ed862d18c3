/* Which address this host listens on (netaddr.h); moved here from
 * runtime/net_tcp.c and runtime/settings.c so that the SPANK plugin, which
 * links only the graph and common code, applies the same rules. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "common/netaddr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void endpoint_from(const struct sockaddr *sa, struct gcoll_tcp_endpoint *ep) {
  ep->family = sa->sa_family;
  if (ep->family == AF_INET)
    memcpy(ep->ip, &((const struct sockaddr_in *)sa)->sin_addr, 4);
  else
    memcpy(ep->ip, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
}

int gcoll_ifname_match(const char *spec, const char *ifname, int *included, char *err,
                       size_t errlen) {
  const char *p = spec;
  int exclude = *p == '^';
  p += exclude;
  int exact = *p == '=';
  p += exact;
  int entries = 0, hit = 0;
  size_t iflen = strlen(ifname);
  while (*p != '\0') {
    size_t n = strcspn(p, ","), name = strcspn(p, ",:");
    if (name > 0) {
      entries++;
      if (exact ? iflen == name && memcmp(ifname, p, name) == 0
                : iflen >= name && memcmp(ifname, p, name) == 0)
        hit = 1;
    }
    p += n;
    if (*p == ',') p++;
  }
  if (included != NULL) *included = !exclude;
  if (entries == 0) {
    snprintf(err, errlen, "'%.64s' names no interface", spec);
    return -1;
  }
  return exclude ? !hit : hit;
}

/* The interface's IPv4 address, else its IPv6 one: IPv4 is what the
 * other hosts of a cluster most likely reach. 0 when found. */
static int interface_address(const char *name, struct gcoll_tcp_endpoint *ep) {
  struct ifaddrs *ifs = NULL, *best = NULL;
  if (getifaddrs(&ifs) != 0) return -1;
  for (struct ifaddrs *i = ifs; i != NULL; i = i->ifa_next) {
    if (i->ifa_addr == NULL || strcmp(i->ifa_name, name) != 0) continue;
    int fam = i->ifa_addr->sa_family;
    if (fam == AF_INET || (fam == AF_INET6 && best == NULL)) best = i;
    if (fam == AF_INET) break;
  }
  if (best != NULL) endpoint_from(best->ifa_addr, ep);
  freeifaddrs(ifs);
  return best != NULL ? 0 : -1;
}

/* Bridges of containers and VMs carry addresses no other host reaches. */
static int host_local_bridge(const char *name) {
  static const char *const prefixes[] = {"docker", "virbr", "veth", "cni", "podman", "lxcbr"};
  for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
    if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0) return 1;
  return 0;
}

/* Lower is better; -1: not usable for traffic between hosts. */
static int interface_rank(const struct ifaddrs *i) {
  if (i->ifa_addr == NULL || i->ifa_name == NULL) return -1;
  int fam = i->ifa_addr->sa_family;
  if (fam != AF_INET && fam != AF_INET6) return -1;
  if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK) || host_local_bridge(i->ifa_name))
    return -1;
  if (fam == AF_INET6) {
    const struct in6_addr *a = &((const struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
    /* A link-local address needs a scope id the peers do not know. */
    if (IN6_IS_ADDR_LINKLOCAL(a) || IN6_IS_ADDR_LOOPBACK(a)) return -1;
  }
  int ipoib = strncmp(i->ifa_name, "ib", 2) == 0;
  return (fam == AF_INET6 ? 2 : 0) + (ipoib ? 0 : 1);
}

int gcoll_tcp_choose_interface(const struct ifaddrs *list, struct gcoll_tcp_endpoint *ep,
                               char *name, size_t namelen) {
  const struct ifaddrs *best = NULL;
  int best_rank = -1;
  for (const struct ifaddrs *i = list; i != NULL; i = i->ifa_next) {
    int r = interface_rank(i);
    if (r >= 0 && (best == NULL || r < best_rank)) {
      best = i;
      best_rank = r;
    }
  }
  if (best == NULL) return -1;
  memset(ep, 0, sizeof(*ep));
  endpoint_from(best->ifa_addr, ep);
  if (name != NULL && namelen > 0) snprintf(name, namelen, "%s", best->ifa_name);
  return 0;
}

/* For a list the user gave, any interface that is up with an address
 * peers can use (no IPv6 link-local or ::1), loopback and bridges included,
 * as with NCCL_SOCKET_IFNAME; lower is better, -1: unusable or not listed.
 * IPv4 before IPv6; loopback and bridges last unless the list names the
 * interfaces to use (an exclusion list did not choose them). */
static int listed_rank(const struct ifaddrs *i, const char *spec, char *err, size_t errlen) {
  if (i->ifa_addr == NULL || i->ifa_name == NULL || !(i->ifa_flags & IFF_UP)) return -1;
  int fam = i->ifa_addr->sa_family;
  if (fam != AF_INET && fam != AF_INET6) return -1;
  if (fam == AF_INET6) {
    const struct in6_addr *a = &((const struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
    if (IN6_IS_ADDR_LINKLOCAL(a) || IN6_IS_ADDR_LOOPBACK(a)) return -1;
  }
  int included;
  if (gcoll_ifname_match(spec, i->ifa_name, &included, err, errlen) != 1) return -1;
  int host_local = (i->ifa_flags & IFF_LOOPBACK) || host_local_bridge(i->ifa_name);
  return (fam == AF_INET6 ? 1 : 0) + (host_local && !included ? 2 : 0);
}

int gcoll_tcp_choose_listed(const struct ifaddrs *list, const char *spec,
                            struct gcoll_tcp_endpoint *ep, char *name, size_t namelen, char *err,
                            size_t errlen) {
  int included;
  if (gcoll_ifname_match(spec, "", &included, err, errlen) < 0) return -1;
  const struct ifaddrs *best = NULL;
  int best_rank = -1;
  for (const struct ifaddrs *i = list; i != NULL; i = i->ifa_next) {
    int r = listed_rank(i, spec, err, errlen);
    if (r >= 0 && (best == NULL || r < best_rank)) {
      best = i;
      best_rank = r;
    }
  }
  if (best == NULL) {
    snprintf(err, errlen, "no interface that is up with a usable address matches '%.64s'", spec);
    return -1;
  }
  memset(ep, 0, sizeof(*ep));
  endpoint_from(best->ifa_addr, ep);
  if (name != NULL && namelen > 0) snprintf(name, namelen, "%s", best->ifa_name);
  return 0;
}

/* ifname's list when given, else the default choice. */
static int choose_from_host(const char *spec, const char *from, struct gcoll_tcp_endpoint *ep,
                            char *err, size_t errlen) {
  struct ifaddrs *ifs = NULL;
  char why[256] = "";
  int rc;
  if (getifaddrs(&ifs) != 0) {
    snprintf(why, sizeof(why), "getifaddrs: %s", strerror(errno));
    rc = -1;
  } else if (spec != NULL) {
    rc = gcoll_tcp_choose_listed(ifs, spec, ep, NULL, 0, why, sizeof(why));
  } else {
    rc = gcoll_tcp_choose_interface(ifs, ep, NULL, 0) == 0 ? 0 : 1;
  }
  if (ifs != NULL) freeifaddrs(ifs);
  if (rc < 0 && spec != NULL)
    snprintf(err, errlen, "%s: %s", from != NULL && *from != '\0' ? from : "GCOLL_SOCKET_IFNAME",
             why);
  return spec != NULL || rc == 0 ? rc : 1;   /* 1: no choice, use loopback */
}

int gcoll_netaddr_pick(const char *v, const char *ifname, const char *ifname_from,
                       struct gcoll_tcp_endpoint *ep, char *err, size_t errlen) {
  memset(ep, 0, sizeof(*ep));
  if (v == NULL) {
    int rc = choose_from_host(ifname, ifname_from, ep, err, errlen);
    if (rc <= 0) return rc;
    v = "127.0.0.1";   /* a host without a network: only local peers exist */
  }
  if (inet_pton(AF_INET, v, ep->ip) == 1) {
    ep->family = AF_INET;
  } else if (inet_pton(AF_INET6, v, ep->ip) == 1) {
    ep->family = AF_INET6;
  } else if (interface_address(v, ep) != 0) {
    snprintf(err, errlen,
             "GCOLL_SOCKET_IFADDR='%.64s' is neither an IP address nor an interface with one", v);
    return -1;
  }
  /* Our address travels to the peers, who connect to it. */
  static const unsigned char zero[16];
  if (memcmp(ep->ip, zero, ep->family == AF_INET ? 4 : 16) == 0) {
    snprintf(err, errlen,
             "GCOLL_SOCKET_IFADDR='%.64s': peers cannot connect to the unspecified address", v);
    return -1;
  }
  return 0;
}

/* ---- sockets ---------------------------------------------------------------- */

socklen_t gcoll_tcp_sockaddr(const struct gcoll_tcp_endpoint *ep, struct sockaddr_storage *ss) {
  memset(ss, 0, sizeof(*ss));
  if (ep->family == AF_INET) {
    struct sockaddr_in *a = (struct sockaddr_in *)ss;
    a->sin_family = AF_INET;
    a->sin_port = htons(ep->port);
    memcpy(&a->sin_addr, ep->ip, 4);
    return sizeof(*a);
  }
  struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
  a->sin6_family = AF_INET6;
  a->sin6_port = htons(ep->port);
  memcpy(&a->sin6_addr, ep->ip, 16);
  return sizeof(*a);
}

void gcoll_tcp_format(const struct gcoll_tcp_endpoint *ep, char *buf, size_t len) {
  char host[INET6_ADDRSTRLEN] = "?";
  inet_ntop(ep->family, ep->ip, host, sizeof(host));
  snprintf(buf, len, ep->family == AF_INET6 ? "[%s]:%u" : "%s:%u", host, (unsigned)ep->port);
}

int gcoll_tcp_listen(struct gcoll_tcp_endpoint *ep, char *err, size_t errlen) {
  struct sockaddr_storage ss;
  struct gcoll_tcp_endpoint any_port = *ep;
  any_port.port = 0;
  socklen_t len = gcoll_tcp_sockaddr(&any_port, &ss);
  int fd = socket(ep->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(err, errlen, "socket: %s", strerror(errno));
    return -1;
  }
  if (bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, SOMAXCONN) != 0) {
    int e = errno;
    char where[80];
    gcoll_tcp_format(&any_port, where, sizeof(where));
    snprintf(err, errlen, "listen on %s: %s", where, strerror(e));
    close(fd);
    return -1;
  }
  len = sizeof(ss);
  if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
    snprintf(err, errlen, "getsockname: %s", strerror(errno));
    close(fd);
    return -1;
  }
  ep->port = ntohs(ep->family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                         : ((struct sockaddr_in6 *)&ss)->sin6_port);
  return fd;
}
