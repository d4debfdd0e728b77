/*
 * shoal_kernel.h: the C entry points of a kernel built for Shoal's library mode (ABI 1).
 *
 * In library mode a build produces a shared object instead of an executable. Shoal's Evaluator
 * keeps one runner process per device; the runner loads each candidate's shared object, calls
 * the four functions below and unloads it, so the device context and the problem's inputs are
 * created once per shape rather than once per candidate.
 *
 *   shoal_abi_version  -> must return SHOAL_KERNEL_ABI; any other number is refused.
 *   shoal_prepare      -> once per problem (shape): allocate and fill the inputs, compute the
 *                         reference answer. Returns an opaque state, or NULL with a message.
 *   shoal_run          -> once per candidate and problem: `warmup` untimed runs, then `repeat`
 *                         timed runs, each timed with device events, and a check of the answer.
 *                         It writes one time per timed run, in microseconds, to samples_us
 *                         (room for `repeat` values) and returns one of the results below; on
 *                         anything but SHOAL_PASS it writes why into err (NUL-terminated, at most
 *                         err_len bytes). Outputs must not carry over between candidates: the
 *                         runner reuses the prepared state, so poison or clear them first.
 *   shoal_release      -> frees a state when the runner no longer needs it.
 *
 * The state is prepared by one candidate and used, then released, by others built from the same
 * sources: it must not depend on compile-time parameters, and every candidate must agree on its
 * layout. The runner may keep several problems prepared at once.
 *
 * `problem` and `run_params` are "NAME=VALUE,NAME=VALUE" in the spec's order ("" when empty):
 * the shape's columns, and the candidate's run-time parameters. Read them with shoal_param.
 *
 * Anything a library prints goes to the runner's stderr, which Shoal keeps for failures.
 */
#ifndef SHOAL_KERNEL_H
#define SHOAL_KERNEL_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define SHOAL_KERNEL_ABI 1

/* shoal_run's results. */
#define SHOAL_PASS 0         /* measured, and the answer matches the reference */
#define SHOAL_WRONG_ANSWER 1 /* ran, but the answer differs: `err` says where */
#define SHOAL_FATAL 2        /* the device failed (a fault, a launch failure): the runner reports
                                a crash and restarts, since the context may be unusable */
#define SHOAL_NOT_APPLICABLE 3 /* this candidate cannot run this problem */

#ifdef __cplusplus
#define SHOAL_EXPORT extern "C" __attribute__((visibility("default")))
#else
#define SHOAL_EXPORT __attribute__((visibility("default")))
#endif

typedef int (*shoal_abi_version_fn)(void);
typedef void *(*shoal_prepare_fn)(const char *problem, char *err, size_t err_len);
typedef int (*shoal_run_fn)(void *state, const char *run_params, int warmup, int repeat,
                            double *samples_us, char *err, size_t err_len);
typedef void (*shoal_release_fn)(void *state);

/*
 * Reads the integer parameter `name` from a "NAME=VALUE,..." list. Returns 1 and sets *value
 * when found and an integer, else 0.
 */
static inline int shoal_param(const char *params, const char *name, long long *value) {
    size_t n = strlen(name);
    const char *p = params;
    while (p && *p) {
        if (strncmp(p, name, n) == 0 && p[n] == '=') {
            char *end = NULL;
            long long v = strtoll(p + n + 1, &end, 10);
            if (end == p + n + 1 || (*end != ',' && *end != '\0')) return 0;
            *value = v;
            return 1;
        }
        p = strchr(p, ',');
        if (p) p++;
    }
    return 0;
}

#endif /* SHOAL_KERNEL_H */
