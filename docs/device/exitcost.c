// What a GPU process's exit costs on this host: cuInit, the primary context, device and
// pinned memory like a 20M-row merge holds, then one of three ends:
//   release: free everything and release the context, then return from main;
//   return:  return from main with everything held (the driver's atexit handlers and the
//            kernel clean up);
//   _exit:   _exit(0) with everything held (no atexit handlers; the kernel cleans up).
// Usage: exitcost MODE DEVICE_MIB PINNED_MIB. Prints the in-process times; the caller times
// the whole process. Built and run by docs/device/exitcost.sh:
//   nvcc -O2 -o /tmp/exitcost docs/device/exitcost.c -lcuda
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "release";
  size_t dev_mb = argc > 2 ? atoi(argv[2]) : 1024, pin_mb = argc > 3 ? atoi(argv[3]) : 64;
  double t0 = now();
  cuInit(0);
  CUdevice d; cuDeviceGet(&d, 0); CUcontext c;
  cuDevicePrimaryCtxRetain(&c, d); cuCtxSetCurrent(c);
  double t1 = now();
  CUdeviceptr dp = 0; void *hp = 0;
  if (dev_mb) cuMemAlloc(&dp, dev_mb << 20);
  if (pin_mb) cuMemHostAlloc(&hp, pin_mb << 20, 0);
  if (dev_mb) cuMemsetD8(dp, 1, dev_mb << 20);
  if (pin_mb) memset(hp, 1, pin_mb << 20);
  cuCtxSynchronize();
  double t2 = now();
  printf("%s: start %.1f ms, allocate %.1f ms", mode, t1 - t0, t2 - t1);
  if (!strcmp(mode, "release")) {
    if (dev_mb) cuMemFree(dp);
    if (pin_mb) cuMemFreeHost(hp);
    cuDevicePrimaryCtxRelease(d);
    printf(", free + release %.1f ms\n", now() - t2);
    return 0;
  }
  printf("\n");
  fflush(stdout);
  if (!strcmp(mode, "_exit")) _exit(0);
  return 0;
}
