/* Preloaded before libfreeride.so: at every ftruncate(2), writes what the session directory
 * ($FREERIDE_DIR) holds at that instant (name and size of each entry) to $SEEN_AT_FTRUNCATE, then
 * truncates. The interposer sizes its ring with ftruncate after creating the file, so this shows
 * what an agent listing the directory at that moment would find. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>

static void record(void) {
    const char *dir = getenv("FREERIDE_DIR");
    const char *log = getenv("SEEN_AT_FTRUNCATE");
    if (!dir || !log) return;
    FILE *f = fopen(log, "a");
    DIR *d = opendir(dir);
    if (f && d) {
        struct dirent *e;
        fprintf(f, "ftruncate\n");
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char p[4096];
            struct stat st;
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            if (stat(p, &st) == 0) fprintf(f, "%s %lld\n", e->d_name, (long long)st.st_size);
        }
    }
    if (d) closedir(d);
    if (f) fclose(f);
}

int ftruncate(int fd, off_t len) {
    static int (*real)(int, off_t);
    if (!real) real = (int (*)(int, off_t))dlsym(RTLD_NEXT, "ftruncate");
    record();
    return real(fd, len);
}

int ftruncate64(int fd, off_t len) {
    static int (*real)(int, off_t);
    if (!real) real = (int (*)(int, off_t))dlsym(RTLD_NEXT, "ftruncate64");
    record();
    return real(fd, len);
}
