/* Lookups in tables of names indexed by an enum: the one rule for a value
 * out of range ("?") and a name not found (-1). */
#ifndef GCOLL_COMMON_NAMES_H
#define GCOLL_COMMON_NAMES_H

/* names[v], or "?" when v is outside 0..n-1. */
const char *gcoll_name_at(const char *const *names, int n, int v);

/* The index of s in names[0..n), or -1 (also for s == NULL). */
int gcoll_name_index(const char *const *names, int n, const char *s);

#endif
