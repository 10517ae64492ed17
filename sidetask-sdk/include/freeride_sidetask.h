/*
 * freeride side-task SDK: C ABI of libfreeride_sidetask.so (crate freeride-sidetask-sdk).
 *
 * A side task runs its GPU work only inside the bubbles ("grants") the freeride agent opens on
 * its GPU. Typical loop:
 *
 *     frst_task *t = frst_create("{\"name\":\"mytask\",\"device\":0}");
 *     ... load data, allocate with frst_alloc ...
 *     frst_set_state(t, FRST_STATE_CREATED);
 *     while (!done) {
 *         int64_t left = frst_wait_for_grant(t, 0, UINT64_MAX);   // 0: learned estimate
 *         if (left == FRST_ERR_STOPPED) break;                     // SIGTERM / frst_request_stop
 *         frst_step_begin(t);
 *         ... queue GPU work (frst_gemm, or your own, synchronized before step_end) ...
 *         frst_step_end(t);                                         // learns the step duration
 *     }
 *     if (done) frst_set_state(t, FRST_STATE_FINISHED);
 *     frst_destroy(t);
 *
 * Config JSON keys (all optional): name, device, session_dir, no_agent ("wait"|"standalone"),
 * probe_min_grant_ns, margin, quantile, window, mem_cap_bytes, poll_min_us, poll_max_us,
 * no_agent_poll_ms, heartbeat_stale_ms, status_interval_ms, write_status, handle_sigterm,
 * overlap_steps and steps_in_flight (used by the Rust Runtime only: frst_step_end always
 * synchronizes), cpu_nice
 * (0..=19, default 19: frst_create lowers every thread of the process to this CPU priority, so the
 * trainer's host threads get the CPU first; 0: leave it).
 * Environment: FREERIDE_DIR, FREERIDE_SIDETASK_DEVICE, FREERIDE_SIDETASK_STANDALONE=1,
 * FREERIDE_SIDETASK_NICE (cpu_nice).
 *
 * Errors are negative return values; frst_last_error() describes the last one on the calling
 * thread. No function lets a panic cross into C. A handle may be used from several threads; calls
 * on one handle are serialized.
 */
#ifndef FREERIDE_SIDETASK_H
#define FREERIDE_SIDETASK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct FrstTask frst_task;

/* Life-cycle states: submitted -> created -> paused <-> running -> finished | stopped. */
enum {
    FRST_STATE_SUBMITTED = 0,
    FRST_STATE_CREATED = 1,
    FRST_STATE_PAUSED = 2,
    FRST_STATE_RUNNING = 3,
    FRST_STATE_FINISHED = 4,
    FRST_STATE_STOPPED = 5
};

/* Return codes. */
#define FRST_OK 0
#define FRST_ERR_TIMEOUT (-1)     /* no grant that fits before the timeout */
#define FRST_ERR_STOPPED (-2)     /* a stop was requested; the task is now stopped */
#define FRST_ERR_INVALID (-3)     /* bad argument, NULL handle, bad config */
#define FRST_ERR_TRANSITION (-4)  /* life-cycle transition not allowed */
#define FRST_ERR_OVER_BUDGET (-5) /* allocation over the memory budget; nothing allocated */
#define FRST_ERR_GPU (-6)         /* CUDA driver missing or failing */
#define FRST_ERR_PANIC (-7)       /* internal error (caught) */
#define FRST_ERR_STATE (-8)       /* not allowed in the current state */

/* Creates a task from a JSON config (NULL or "" = defaults); NULL on error. */
frst_task *frst_create(const char *config_json);
/* Frees the task and its device memory; writes the final status. NULL is ignored. */
void frst_destroy(frst_task *task);
/* Message of the last error on this thread ("" if none); valid until the next call. */
const char *frst_last_error(void);

/* Current state (FRST_STATE_*), or a negative error. */
int32_t frst_state(const frst_task *task);
/* Moves to `state`: FRST_OK or FRST_ERR_TRANSITION. */
int32_t frst_set_state(frst_task *task, int32_t state);

/* Waits until a step of step_estimate_ns (0 = the learned estimate) fits in the grant, for at
 * most timeout_ns (0 = check once, UINT64_MAX = forever). Moves created/paused -> running when it
 * fits, running -> paused while it does not. Returns the grant's time left in ns (> 0; INT64_MAX
 * when unbounded), FRST_ERR_TIMEOUT or FRST_ERR_STOPPED. */
int64_t frst_wait_for_grant(frst_task *task, uint64_t step_estimate_ns, uint64_t timeout_ns);
/* frst_wait_for_grant with the learned estimate, for a task that can scale its work: it returns
 * also when only part of a step fits, at least min_fraction (0 < min_fraction <= 1), and writes to
 * *out_fraction 1.0 (a whole step: frst_step_begin) or the share that fits (frst_step_begin_partial).
 * Waiting for whole steps only, a task whose estimate a slow spell inflated past every grant would
 * wait for good; partial steps bring the estimate down again. */
int64_t frst_wait_for_step(frst_task *task, double min_fraction, uint64_t timeout_ns,
                           double *out_fraction);
/* Starts timing a step (the task must be running). */
int32_t frst_step_begin(frst_task *task);
/* Synchronizes the SDK's stream, records the step; returns its duration in ns or an error. */
int64_t frst_step_end(frst_task *task);

/* Partial steps, for a task that can scale its work (a smaller minibatch, fewer items): where a
 * whole step no longer fits the grant (the last one before a bubble ends), part of one may.
 * frst_step_fraction_fits writes to *out_fraction 1.0 when a whole step fits, the share that fits
 * (min_fraction <= share < 1) when only part of one does, 0.0 when not even min_fraction does, no
 * grant is open or the step estimates are not learned yet (0 < min_fraction < 1). It does not
 * wait. frst_step_begin_partial then starts a step of `fraction` (at most the share offered; one
 * offer, one step) and moves the task to running: queue about that share of a step's GPU work and
 * end it with frst_step_end. It counts against the grant and in "partial_steps"; scaled to a
 * whole step, its duration may lower the step estimate, never raise it. To wait for either, use
 * frst_wait_for_step.
 *
 *     double f;
 *     if (frst_step_fraction_fits(t, 0.25, &f) == FRST_OK && f > 0.0 && f < 1.0) {
 *         frst_step_begin_partial(t, f);
 *         ... queue f of a step's work ...
 *         frst_step_end(t);
 *     }
 */
int32_t frst_step_fraction_fits(frst_task *task, double min_fraction, double *out_fraction);
int32_t frst_step_begin_partial(frst_task *task, double fraction);

/* Queues C (m x n) = A (m x k) . B (k x n) on the task's stream through cuBLAS: fp32, column-major,
 * a/b/c device buffers from frst_alloc of at least those sizes. A real kernel on a GPU; the test
 * bed's stand-in BLAS runs it for m*n*k/1000 ns. */
int32_t frst_gemm(frst_task *task, uint32_t m, uint32_t n, uint32_t k, uint64_t a, uint64_t b,
                  uint64_t c);
/* Sets `bytes` bytes of device memory at ptr (from frst_alloc) to `value`, synchronously. */
int32_t frst_fill(frst_task *task, uint64_t ptr, uint64_t bytes, uint8_t value);
/* Queues simulated kernel `name` running duration_ns on the task's stream (test bed only: a real
 * driver has no such kernel). */
int32_t frst_launch(frst_task *task, const char *name, uint64_t duration_ns);
/* Waits for the task's stream. */
int32_t frst_sync(frst_task *task);

/* Device memory within the budget (grant's mem_budget_bytes, config mem_cap_bytes). */
int32_t frst_alloc(frst_task *task, uint64_t bytes, uint64_t *out_device_ptr);
int32_t frst_free(frst_task *task, uint64_t device_ptr);
int64_t frst_mem_held(const frst_task *task);

/* Stop requests (SIGTERM does the same when handle_sigterm is on, the default). */
int32_t frst_request_stop(frst_task *task);
int32_t frst_stop_requested(const frst_task *task);

/* Counters. */
int64_t frst_step_estimate_ns(const frst_task *task); /* 0 until a step was measured */
int64_t frst_steps(const frst_task *task);
/* Summary JSON {"task","state","steps","partial_steps","gpu_busy_ms","wall_ms",...} with extra_json's fields
 * (an object, may be NULL) merged; valid until the next call on this thread; NULL on error. */
const char *frst_summary_json(const frst_task *task, const char *extra_json);

#ifdef __cplusplus
}
#endif

#endif /* FREERIDE_SIDETASK_H */
