/* Test program for perfring's trigger tests: quiet (spinning, no faults), then
 * touching fresh pages, then quiet. It waits for a byte on stdin before its phases
 * and then prints when the fault phase began and ended on CLOCK_MONOTONIC (the clock
 * the samples are stamped with) and the CPU time it took. With a third argument the
 * phases run in a new thread beside one that only spins, and both thread ids follow.
 * Usage: phases SPIN_ITERATIONS PAGES [threads] */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <pthread.h>
static long long now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}
static void spin(long n) { for (volatile long i = 0; i < n; i++) {} }
static long n, pages, page;
static char *mem;
static long long t1, t2, cpu;
static long long cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}
static void phases(void) {
    spin(n);
    long long c = cpu_now();
    t1 = now();
    for (long i = 0; i < pages; i++) mem[i * page] = 1;
    t2 = now();
    cpu = cpu_now() - c;
    spin(n);
}
static pid_t faulter, spinner;
static void *fault_thread(void *arg) { faulter = gettid(); phases(); return arg; }
static void *spin_thread(void *arg) { spinner = gettid(); spin(3 * n); return arg; }
int main(int argc, char **argv) {
    n = atol(argv[1]);
    pages = atol(argv[2]);
    page = sysconf(_SC_PAGESIZE);
    mem = mmap(0, pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return 2;
    madvise(mem, pages * page, MADV_NOHUGEPAGE); /* one fault per page */
    char go;
    if (read(0, &go, 1) != 1) return 3;
    if (argc > 3) { /* two threads: one with the phases, one only spinning */
        pthread_t a, b;
        pthread_create(&a, 0, fault_thread, 0);
        pthread_create(&b, 0, spin_thread, 0);
        pthread_join(a, 0);
        pthread_join(b, 0);
    } else {
        phases();
    }
    /* Printed without stdio and ended without exit handlers: no page faults (a
     * stdio buffer's first use faults) at the end of the last quiet phase. */
    char line[128];
    int len = argc > 3
        ? snprintf(line, sizeof line, "%lld %lld %lld %d %d\n", t1, t2, cpu, faulter, spinner)
        : snprintf(line, sizeof line, "%lld %lld %lld\n", t1, t2, cpu);
    if (write(1, line, len) != len) _exit(4);
    _exit(0);
}
