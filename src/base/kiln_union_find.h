/* Union-find over integer ids 0..n-1 in a caller-owned parent array
 * (parent[i] = i to start): joins keep the smaller id as the root, so a
 * set's root is its first member. */
#ifndef KILN_UNION_FIND_H
#define KILN_UNION_FIND_H

#include <stdint.h>

static inline int32_t kiln_union_find_root(int32_t* parent, int32_t i) {
  while (parent[i] != i) {
    parent[i] = parent[parent[i]];
    i = parent[i];
  }
  return i;
}

static inline void kiln_union_find_join(int32_t* parent, int32_t a, int32_t b) {
  a = kiln_union_find_root(parent, a), b = kiln_union_find_root(parent, b);
  if (a != b) parent[a < b ? b : a] = a < b ? a : b;
}

#endif /* KILN_UNION_FIND_H */
