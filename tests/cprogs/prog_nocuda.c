/* No CUDA at all: the process must behave exactly as without freeride. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(void) {
    int ok = 1;
    ok &= dlsym(RTLD_DEFAULT, "cudaLaunchKernel") == NULL;
    ok &= dlsym(RTLD_DEFAULT, "__cudaLaunchKernel") == NULL;
    ok &= dlsym(RTLD_DEFAULT, "ncclSend") == NULL;
    ok &= dlsym(RTLD_DEFAULT, "cuLaunchKernel") == NULL;
    ok &= dlsym(RTLD_NEXT, "cuLaunchKernel") == NULL;
    void *(*m)(size_t) = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    ok &= m != NULL;
    ok &= dlsym(RTLD_DEFAULT, "strlen") == (void *)strlen;
    void *d = dlsym(RTLD_DEFAULT, "dlsym");
    ok &= d != NULL;
    if (d) ok &= ((void *(*)(void *, const char *))d)(RTLD_DEFAULT, "printf") == (void *)printf;
    printf("%s\n", ok ? "OK" : "FAIL");
    return !ok;
}
