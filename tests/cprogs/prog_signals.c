/* Launches from a signal handler while the main thread launches: never deadlocks. */
#include <signal.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/time.h>
typedef struct { unsigned x, y, z; } dim3;
int __cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, void *);
static volatile int hits;
static void launch(long s) {
    dim3 g = {1, 1, 1}, b = {32, 1, 1};
    uint64_t ns = 0; void *p[1] = {&ns};
    __cudaLaunchKernel((void *)launch, g, b, p, 0, (void *)s);
}
static void on_alarm(int sig) { (void)sig; launch(0x301); hits++; }
int main(void) {
    struct sigaction sa; memset(&sa, 0, sizeof sa); sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, 0);
    struct itimerval it = {{0, 200}, {0, 200}};
    setitimer(ITIMER_REAL, &it, 0);
    for (int i = 0; i < 200000; i++) launch(0x300);
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, 0);
    printf("OK %d\n", hits);
    return 0;
}
