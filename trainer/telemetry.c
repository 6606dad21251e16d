/*
 * telemetry.c - the per-step log line, the val line, their JSON twins, and peak RSS.
 *
 * The step line always starts "step N | loss X.XXXXXX |" (6 decimals) so scripts can
 * grep it; the rest is tokens/s, the ms split (forward, backward, optimizer, data), the
 * peak resident set (getrusage ru_maxrss) and achieved FLOP/s, counted PaLM-style as
 * 6*N + 12*L*C*T FLOPs per trained token (N = parameters with the unpadded vocabulary).
 */
#include <sys/resource.h>

#include "train.h"

double train_peak_rss_mib(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0.0;
    return (double)ru.ru_maxrss / 1024.0;   // ru_maxrss is in KiB on Linux
}

void train_log_step(FILE *out, FILE *json, const train_stats_t *s)
{
    fprintf(out, "step %d | loss %.6f | lr %.3e | norm %.4f | %.0f tok/s | "
            "ms fwd %.1f bwd %.1f opt %.1f data %.1f | rss %.1f MiB | %.2f GFLOP/s",
            s->step, s->loss, s->lr, s->norm, s->tokens_per_s, s->ms_fwd, s->ms_bwd,
            s->ms_opt, s->ms_data, s->rss_mib, s->flops_per_s * 1e-9);
    if (s->dist)
        fprintf(out, " | comm exposed %.1f ms, %.2f MiB | state %.2f MiB + %.2f in flight",
                s->ms_comm, s->comm_mib, s->state_mib, s->inflight_mib);
    fputc('\n', out);
    fflush(out);
    if (json) {
        fprintf(json, "{\"step\": %d, \"loss\": %.6f, \"lr\": %.6e, \"grad_norm\": %.6f, "
                "\"tokens_per_s\": %.1f, \"ms_fwd\": %.3f, \"ms_bwd\": %.3f, "
                "\"ms_opt\": %.3f, \"ms_data\": %.3f, \"peak_rss_mib\": %.1f, "
                "\"flops_per_s\": %.6e",
                s->step, s->loss, s->lr, s->norm, s->tokens_per_s, s->ms_fwd, s->ms_bwd,
                s->ms_opt, s->ms_data, s->rss_mib, s->flops_per_s);
        if (s->dist)
            fprintf(json, ", \"exposed_comm_ms\": %.3f, \"comm_bytes\": %.0f, "
                    "\"model_state_bytes\": %.0f, \"inflight_peak_bytes\": %.0f",
                    s->ms_comm, s->comm_mib * 1048576.0, s->state_mib * 1048576.0,
                    s->inflight_mib * 1048576.0);
        fputs("}\n", json);
        fflush(json);
    }
}

void train_log_val(FILE *out, FILE *json, int step, float val_loss, int batches)
{
    fprintf(out, "val step %d | val loss %.6f | %d batches\n", step, val_loss, batches);
    fflush(out);
    if (json) {
        fprintf(json, "{\"step\": %d, \"val_loss\": %.6f, \"val_batches\": %d}\n",
                step, val_loss, batches);
        fflush(json);
    }
}
