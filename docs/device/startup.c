// The CUDA driver's own start-up costs on this host, which no GPU merge avoids: cuInit, the
// primary context, two pinned buffers of MIB MiB each (0: none) pinned and unpinned, and the
// context's release; the caller times the whole process.
// Usage: startup [MIB]   (default 64). Built and run by docs/device/startup.sh:
//   nvcc -O2 -o /tmp/startup docs/device/startup.c -lcuda
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
int main(int argc, char **argv) {
  size_t mb = argc > 1 ? atoi(argv[1]) : 64;
  double t0 = now();
  cuInit(0); double t1 = now();
  CUdevice d; cuDeviceGet(&d, 0); CUcontext c;
  cuDevicePrimaryCtxRetain(&c, d); cuCtxSetCurrent(c); double t2 = now();
  void *a = 0, *b = 0;
  if (mb) { cuMemHostAlloc(&a, mb << 20, 0); cuMemHostAlloc(&b, mb << 20, 0); }
  double t3 = now();
  if (mb) { cuMemFreeHost(a); cuMemFreeHost(b); }
  double t4 = now();
  cuDevicePrimaryCtxRelease(d); double t5 = now();
  printf("pinned %zu MiB x2: cuInit %.1f ms, context %.1f ms, alloc %.1f ms, free %.1f ms, release %.1f ms\n", mb, t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4);
  return 0;
}
