/* Dataloader-style workers forked while 4 threads keep launching (the ring push, the trace and the
 * per-thread state are in use at the moment of fork): each child launches 10 kernels, forks a
 * grandchild that execs this program (3 launches), and exits; the parent's threads launch until
 * the last worker is done. Prints "OK <children> <parent launches>" once everything joined. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
typedef struct { unsigned x, y, z; } dim3;
int __cudaLaunchKernel(const void *, dim3, dim3, void **, size_t, void *);
static void launch(int n, long s) {
    dim3 g = {1, 1, 1}, b = {32, 1, 1};
    uint64_t ns = 0; void *p[1] = {&ns};
    for (int i = 0; i < n; i++) __cudaLaunchKernel((void *)launch, g, b, p, 0, (void *)s);
}
static volatile int stop;
static long counts[4];
static void *worker(void *arg) {
    long i = (long)arg - 0x100;
    while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
        launch(1, (long)arg);
        counts[i]++;
        usleep(50);
    }
    return 0;
}
int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc > 1 && !strcmp(argv[1], "exec")) { launch(3, 0x303); return 0; }
    pthread_t t[4];
    for (long i = 0; i < 4; i++) pthread_create(&t[i], 0, worker, (void *)(0x100 + i));
    int children = 0;
    for (int k = 0; k < 6; k++) {
        pid_t c = fork();
        if (c == 0) {
            launch(10, 0x301);
            pid_t g = fork();
            if (g == 0) {
                usleep(20000); /* FREERIDE_TRACE drains every 0.5 ms; exec skips exit handlers */
                execl("/proc/self/exe", argv[0], "exec", (char *)0);
                _exit(9);
            }
            int st;
            waitpid(g, &st, 0);
            _exit(WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 3);
        }
        int st;
        waitpid(c, &st, 0);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) children++;
        usleep(2000);
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    long total = 0;
    for (int i = 0; i < 4; i++) { pthread_join(t[i], 0); total += counts[i]; }
    printf("OK %d %ld\n", children, total);
    return 0;
}
