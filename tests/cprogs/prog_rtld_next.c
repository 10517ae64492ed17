#include <stdio.h>
int nextuser_run(int n);
int main(void) {
    int r = nextuser_run(17);
    printf("%s\n", r ? "FAIL" : "OK");
    return r != 0;
}
