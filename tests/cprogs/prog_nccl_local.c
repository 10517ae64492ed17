#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    void *h = dlopen(argc > 1 ? argv[1] : "libncclpart.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) { printf("FAIL %s\n", dlerror()); return 1; }
    int (*run)(void) = (int (*)(void))dlsym(h, "part_run");
    /* the trap: NCCL is loaded, but not visible globally */
    if (!run || dlsym(RTLD_DEFAULT, "pncclSend")) { printf("FAIL scope\n"); return 1; }
    int r = run();
    usleep(30000); /* like a synchronize: let the fake GPU finish before exit */
    printf("%s\n", r ? "FAIL" : "OK");
    return r != 0;
}
