/* Compiled against include/freeride_sidetask.h and run on the test bed by tests/c_abi.rs.
 * argv[1]: the session directory. Exits 0 and prints "C-ABI OK" when every check passes. */
#include "freeride_sidetask.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "check failed at line %d: %s (last error: %s)\n",   \
                    __LINE__, #cond, frst_last_error());                         \
            return 1;                                                            \
        }                                                                        \
    } while (0)

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: smoke SESSION_DIR\n");
        return 2;
    }
    CHECK(frst_create("{not json") == NULL);
    CHECK(strlen(frst_last_error()) > 0);
    CHECK(frst_state(NULL) == FRST_ERR_INVALID);

    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"name\":\"c-smoke\",\"no_agent\":\"standalone\",\"mem_cap_bytes\":1048576,"
             "\"session_dir\":\"%s\"}",
             argv[1]);
    frst_task *t = frst_create(cfg);
    CHECK(t != NULL);
    CHECK(frst_state(t) == FRST_STATE_SUBMITTED);
    CHECK(frst_set_state(t, FRST_STATE_RUNNING) == FRST_ERR_TRANSITION);
    CHECK(frst_set_state(t, 42) == FRST_ERR_INVALID);
    CHECK(frst_set_state(t, FRST_STATE_CREATED) == FRST_OK);

    uint64_t p = 0;
    CHECK(frst_alloc(t, 2u << 20, &p) == FRST_ERR_OVER_BUDGET);
    CHECK(frst_mem_held(t) == 0);
    CHECK(frst_alloc(t, 512u << 10, &p) == FRST_OK);
    CHECK(p != 0);
    CHECK(frst_mem_held(t) == 512 << 10);
    CHECK(frst_alloc(t, 768u << 10, &p) == FRST_ERR_OVER_BUDGET);
    CHECK(frst_free(t, p) == FRST_OK);
    CHECK(frst_mem_held(t) == 0);
    CHECK(frst_free(t, p) != FRST_OK);

    CHECK(frst_step_begin(t) == FRST_ERR_STATE);
    CHECK(frst_step_estimate_ns(t) == 0);
    for (int i = 0; i < 5; i++) {
        int64_t left = frst_wait_for_grant(t, 0, 1000000000ull);
        CHECK(left > 0);
        CHECK(frst_state(t) == FRST_STATE_RUNNING);
        CHECK(frst_step_begin(t) == FRST_OK);
        CHECK(frst_launch(t, "c_kernel", 200000) == FRST_OK);
        int64_t ns = frst_step_end(t);
        CHECK(ns >= 200000);
    }
    /* Partial steps: with no agent (standalone) a whole step always fits, nothing is offered. */
    double f = -1.0;
    CHECK(frst_step_fraction_fits(t, 0.0, &f) == FRST_ERR_INVALID);
    CHECK(frst_step_fraction_fits(t, 0.25, NULL) == FRST_ERR_INVALID);
    CHECK(frst_step_fraction_fits(t, 0.25, &f) == FRST_OK);
    CHECK(f == 1.0);
    f = -1.0;
    CHECK(frst_wait_for_step(t, 0.25, 0, &f) > 0);
    CHECK(f == 1.0);
    CHECK(frst_step_begin_partial(t, 0.5) == FRST_ERR_STATE);
    CHECK(frst_steps(t) == 5);
    CHECK(frst_step_estimate_ns(t) >= 200000);
    const char *js = frst_summary_json(t, "{\"lang\":\"c\"}");
    CHECK(js != NULL);
    CHECK(strstr(js, "\"steps\":5") != NULL);
    CHECK(strstr(js, "\"partial_steps\":0") != NULL);
    CHECK(strstr(js, "\"lang\":\"c\"") != NULL);
    printf("%s\n", js);

    CHECK(frst_set_state(t, FRST_STATE_FINISHED) == FRST_OK);
    CHECK(frst_set_state(t, FRST_STATE_RUNNING) == FRST_ERR_TRANSITION);
    CHECK(frst_wait_for_grant(t, 0, 0) == FRST_ERR_STATE);
    frst_destroy(t);
    frst_destroy(NULL);
    printf("C-ABI OK\n");
    return 0;
}
