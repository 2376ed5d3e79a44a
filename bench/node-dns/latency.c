/* latency NAME COUNT: getaddrinfo(NAME) for both families (A and AAAA asked at once from one
 * socket, as glibc does) COUNT times, one after another; prints the p50, p99 and max of a
 * lookup in microseconds, and the lookups that failed. */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
int main(int argc, char **argv) {
    int n = atoi(argv[2]), failed = 0;
    double *us = calloc(n, sizeof *us);
    for (int i = 0; i < n; i++) {
        struct addrinfo hints, *res;
        memset(&hints, 0, sizeof hints);
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        double t0 = now_us();
        if (getaddrinfo(argv[1], NULL, &hints, &res)) failed++; else freeaddrinfo(res);
        us[i] = now_us() - t0;
    }
    qsort(us, n, sizeof *us, cmp);
    printf("p50_us %.0f p99_us %.0f max_us %.0f failed %d\n", us[n / 2], us[n * 99 / 100], us[n - 1], failed);
    return 0;
}
