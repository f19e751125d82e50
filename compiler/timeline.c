/* timeline.c - pictures of a simulated schedule (see timeline.h): the
 * seed's pipeline diagram as SVG (cells labelled with direction, stage and
 * microbatch where they fit, a tooltip on each, coloured by microbatch),
 * the same diagram as fixed-width text for report.txt (faithful at any
 * size: exact, or scaled with symbols for shared columns, in bands), and a
 * Chrome trace event file in microseconds with a track per worker for its
 * jobs and one for the transfers it receives.
 *
 * Times are doubles in the simulator's unit (1 per job by default, but any
 * positive reals, e.g. measured seconds). Every renderer iterates jobs by id
 * rather than by sim->order, so a partial (deadlocked) result cannot make a
 * job appear twice, and skips jobs whose times are not finite. */
#include "timeline.h"

#include "numfmt.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A job's times are drawable when finite, non-negative and ordered. */
static int job_ok(const pp_jobtable *t, const pp_sim_result *sim, int j)
{
    double a = sim->start[j], b = sim->end[j];
    return job_exists(&t->js, j) && isfinite(a) && isfinite(b) && a >= 0 && b >= a;
}

static int digits(long long x)
{
    int n = 1;
    while (x >= 10) {
        x /= 10;
        n++;
    }
    return n;
}

/* The shortest positive job, so that the renderers can give the shortest
 * cell enough room for its label; 1 when there is none. */
static double min_cost(const pp_jobtable *t, const pp_sim_result *sim)
{
    double m = 0;
    for (int j = 0; j < job_count(&t->js); j++) {
        double c = sim->end[j] - sim->start[j];
        if (job_ok(t, sim, j) && c > 0 && (m == 0 || c < m))
            m = c;
    }
    return m > 0 ? m : 1;
}

static double safe_makespan(const pp_sim_result *sim)
{
    return isfinite(sim->makespan) && sim->makespan > 0 ? sim->makespan : 0;
}

/* A "nice" tick step (1, 2 or 5 times a power of ten) whose ticks are at
 * least `gap` output units apart at `scale` units per time unit, and whose
 * last label fits in that gap too when `char_units` > 0 (text). */
static double tick_step(double makespan, double scale, double gap, double char_units)
{
    if (!(makespan > 0) || !(scale > 0))
        return 1;
    double step = pow(10, floor(log10(makespan)) - 3);
    for (int i = 0; i < 64; i++) {
        double m[3] = {1, 2, 5};
        for (int k = 0; k < 3; k++) {
            double s = step * m[k];
            char buf[64];
            snprintf(buf, sizeof buf, "%g", floor(makespan / s) * s);
            double need = gap + char_units * (double)strlen(buf);
            if (s * scale >= need)
                return s;
        }
        step *= 10;
    }
    return makespan;
}

/* ---- SVG ------------------------------------------------------------------ */

enum {
    SVG_ROW = 14,     /* px per worker row */
    SVG_CELL_H = 12,  /* the 2 px left over separate the rows */
    SVG_TOP = 56,     /* title and two lines of legend */
    SVG_AXIS = 42,    /* time axis below the rows, and its unit */
    SVG_PALETTE = 16, /* hues; microbatch b gets hue b mod 16 */
};
/* A plot wide enough for the shortest job's label, up to this: 1F1B at
 * S=16 B=64 (158 units of "F15.63") takes about 6000 px and is labelled
 * throughout; 64 x 256 would take 28000 and is scaled down to this, its
 * cells then named by their tooltips only. */
#define SVG_MAX_PLOT 16000.0
#define SVG_MIN_PLOT 320.0
#define SVG_CHAR_PX 5.6   /* width of one glyph of the 9px label font, generously */
#define SVG_LABEL_PAD 4.0 /* px a label leaves free in its cell */

/* A cell's label: direction, stage, '.', microbatch ("F3.17"); returns its length. */
static int svg_label(char *buf, size_t n, const pp_jobspace *js, int j)
{
    return snprintf(buf, n, "%c%d.%d", dir_char(job_d(js, j)), job_s(js, j), job_b(js, j));
}

/* Whether a label of `len` glyphs fits a cell `cw` px wide. */
static int svg_fits(int len, double cw) { return cw >= len * SVG_CHAR_PX + SVG_LABEL_PAD; }

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '&':
            fputs("&amp;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        default:
            fputc(*s, f);
        }
    }
}

/* A coordinate with at most two decimals and no trailing zeros: px are
 * only drawn that finely, and it keeps a 32768-cell file small. */
static void px(FILE *f, double x)
{
    char buf[PP_NUMFMT_MAX];
    if (!isfinite(x) || fabs(x) < 0.005)
        x = 0;
    char *e = buf + pp_fmt_fixed2(buf, x);
    while (e[-1] == '0')
        *--e = '\0';
    if (e[-1] == '.')
        e[-1] = '\0';
    fputs(buf, f);
}

/* Text pieces of the big writers' lines, built by hand (numfmt.h). */
#define LIT(p, s) (memcpy(p, s, sizeof s - 1), (p) += sizeof s - 1)
static char *put_int(char *p, long long v) { return p + pp_fmt_i64(p, v); }

/* px's text at p; returns the end. */
static char *put_px(char *p, double x)
{
    if (!isfinite(x) || fabs(x) < 0.005)
        x = 0;
    char *e = p + pp_fmt_fixed2(p, x);
    while (e[-1] == '0')
        e--;
    if (e[-1] == '.')
        e--;
    return e;
}

/* A job's rect with its tooltip: "<rect class=\"j %c%d\" x=\"PX\" y=\"%d\"
 * width=\"PX\" height=\"%d\"><title>%c(s=%d,b=%d) on w%d: %g to %g</title></rect>\n". */
static void svg_cell(FILE *f, int d, int s, int b, int w, double x, int y, double cw, double start,
                     double end)
{
    char line[256 + 4 * PP_NUMFMT_MAX], *p = line;
    LIT(p, "<rect class=\"j ");
    *p++ = dir_char(d);
    p = put_int(p, b % SVG_PALETTE);
    LIT(p, "\" x=\"");
    p = put_px(p, x);
    LIT(p, "\" y=\"");
    p = put_int(p, y);
    LIT(p, "\" width=\"");
    p = put_px(p, cw);
    LIT(p, "\" height=\"");
    p = put_int(p, SVG_CELL_H);
    LIT(p, "\"><title>");
    *p++ = dir_char(d);
    LIT(p, "(s=");
    p = put_int(p, s);
    LIT(p, ",b=");
    p = put_int(p, b);
    LIT(p, ") on w");
    p = put_int(p, w);
    LIT(p, ": ");
    p += pp_fmt_g(p, start, 6);
    LIT(p, " to ");
    p += pp_fmt_g(p, end, 6);
    LIT(p, "</title></rect>\n");
    fwrite(line, 1, (size_t)(p - line), f);
}

int pp_timeline_svg(FILE *f, const pp_jobtable *t, const pp_sim_result *sim)
{
    return pp_timeline_svg_unit(f, t, sim, NULL);
}

int pp_timeline_svg_unit(FILE *f, const pp_jobtable *t, const pp_sim_result *sim,
                         const char *time_unit)
{
    const pp_jobspace *js = &t->js;
    int N = job_count(js), W = t->W;
    double M = safe_makespan(sim);
    double unit = min_cost(t, sim);
    /* px per time unit: the shortest job gets room for the longest label
     * unless that makes the plot too wide; then everything is scaled down
     * together and the labels that no longer fit are left to the tooltips. */
    int longest = 2 + digits(js->S > 0 ? js->S - 1 : 0) + digits(js->B > 0 ? js->B - 1 : 0);
    double need = longest * SVG_CHAR_PX + SVG_LABEL_PAD;
    double scale = M > 0 ? fmin(need / unit, SVG_MAX_PLOT / M) : 1;
    if (M > 0 && M * scale < SVG_MIN_PLOT)
        scale = SVG_MIN_PLOT / M;
    double left = 14 + 7.0 * (1 + digits(W > 0 ? W - 1 : 0));
    double plot = M * scale;
    double width = fmax(left + plot + 24, 820); /* room for the legend */
    double height = SVG_TOP + (double)W * SVG_ROW + SVG_AXIS;

    fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", f);
    fputs("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", f);
    px(f, width);
    fputs("\" height=\"", f);
    px(f, height);
    fputs("\" viewBox=\"0 0 ", f);
    px(f, width);
    fputc(' ', f);
    px(f, height);
    fputs("\">\n<style>\n"
          "text{font-family:sans-serif;font-size:11px;fill:#222}\n"
          ".wl{text-anchor:end;font-size:10px}\n"
          ".c{text-anchor:middle;font-size:9px;pointer-events:none}\n"
          ".cw{fill:#fff}\n"
          ".ax{stroke:#555;stroke-width:1}\n"
          ".tk{text-anchor:middle;font-size:10px}\n"
          "rect.j{stroke:#fff;stroke-width:0.4}\n",
          f);
    /* One rule per (palette hue, direction): rects name it by class instead
     * of carrying a fill each. Golden-angle hues keep neighbouring
     * microbatches far apart on the colour wheel; backward cells are darker
     * and weight-gradient cells darker still, so directions read apart even
     * where the cells are too narrow for a label. */
    static const int light[3] = {78, 60, 44};
    for (int k = 0; k < SVG_PALETTE && k < js->B; k++)
        for (int d = 0; d < js->ND; d++)
            fprintf(f, ".%c%d{fill:hsl(%.1f,70%%,%d%%)}\n", dir_char(d), k,
                    fmod(k * 137.50776405, 360.0), light[d]);
    /* re-run forwards (recompute): the forward's hue, greyed */
    for (int k = 0; js->recompute && k < SVG_PALETTE && k < js->B; k++)
        fprintf(f, ".R%d{fill:hsl(%.1f,25%%,70%%)}\n", k, fmod(k * 137.50776405, 360.0));
    fputs("</style>\n<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n", f);

    char line[256];
    snprintf(line, sizeof line, "pipeline timeline: S=%d B=%d W=%d, makespan %g", js->S, js->B, W,
             M);
    fputs("<text x=\"8\" y=\"15\">", f);
    xml_text(f, line);
    fputs("</text>\n<text x=\"8\" y=\"31\">", f);
    /* Whether any cell is labelled, so the legend can say when none is. */
    int labelled = 0;
    for (int j = 0; j < N && !labelled; j++) {
        char lab[40];
        labelled = job_ok(t, sim, j) && svg_fits(svg_label(lab, sizeof lab, js, j),
                                                 (sim->end[j] - sim->start[j]) * scale);
    }
    snprintf(line, sizeof line,
             "label F3.17: forward of stage 3, microbatch 17 (B backward%s%s); %s",
             js->ND == 3 ? ", W weight gradient" : "", js->recompute ? ", R re-run forward" : "",
             labelled ? "cells too narrow for theirs: hover for the job and its times"
                      : "no cell is wide enough for one at this scale: hover for the job and its "
                        "times");
    xml_text(f, line);
    fputs("</text>\n<text x=\"8\" y=\"47\">", f);
    snprintf(line, sizeof line,
             "colour: microbatch (%d hues, cycling); shade: F light, B darker%s; white: idle",
             SVG_PALETTE, js->ND == 3 ? ", W darkest" : "");
    xml_text(f, line);
    fputs("</text>\n", f);

    for (int w = 0; w < W; w++)
        fprintf(f, "<text class=\"wl\" x=\"%d\" y=\"%d\">w%d</text>\n", (int)left - 5,
                SVG_TOP + w * SVG_ROW + 10, w);

    /* One rect per job with its tooltip; its label only when it fits inside
     * the cell. */
    for (int j = 0; j < N; j++) {
        if (!job_ok(t, sim, j))
            continue;
        int s = job_s(js, j), b = job_b(js, j), d = job_d(js, j), w = t->worker[j];
        double x = left + sim->start[j] * scale, cw = (sim->end[j] - sim->start[j]) * scale;
        int y = SVG_TOP + w * SVG_ROW + (SVG_ROW - SVG_CELL_H) / 2;
        svg_cell(f, d, s, b, w, x, y, cw, sim->start[j], sim->end[j]);
        char lab[40];
        if (svg_fits(svg_label(lab, sizeof lab, js, j), cw)) {
            /* the darkest (W) cells take white text */
            fputs(d == 2 ? "<text class=\"c cw\" x=\"" : "<text class=\"c\" x=\"", f);
            px(f, x + cw / 2);
            fprintf(f, "\" y=\"%d\">%s</text>\n", y + 9, lab);
        }
    }

    /* Time axis: a line under the rows with ticks at least 60 px apart. */
    double ay = SVG_TOP + (double)W * SVG_ROW + 3;
    fputs("<line class=\"ax\" x1=\"", f);
    px(f, left);
    fputs("\" y1=\"", f);
    px(f, ay);
    fputs("\" x2=\"", f);
    px(f, left + plot);
    fputs("\" y2=\"", f);
    px(f, ay);
    fputs("\"/>\n", f);
    if (M > 0) {
        double step = tick_step(M, scale, 60, 0);
        for (long k = 0; k * step <= M * (1 + 1e-12) && k < 1000; k++) {
            double x = left + k * step * scale;
            fputs("<line class=\"ax\" x1=\"", f);
            px(f, x);
            fputs("\" y1=\"", f);
            px(f, ay);
            fputs("\" x2=\"", f);
            px(f, x);
            fputs("\" y2=\"", f);
            px(f, ay + 4);
            fputs("\"/><text class=\"tk\" x=\"", f);
            px(f, x);
            fputs("\" y=\"", f);
            px(f, ay + 16);
            fprintf(f, "\">%g</text>\n", k * step);
        }
    }
    /* the axis's unit: --costs' (seconds unless it says), else the schedule's */
    fputs("<text class=\"tk\" x=\"", f);
    px(f, left + plot / 2);
    fputs("\" y=\"", f);
    px(f, ay + 32);
    fputs("\">time (", f);
    xml_text(f, time_unit && pp_costs_unit_us(time_unit) > 0
                    ? time_unit
                    : "schedule time units: a job costs 1 unless "
                      "its cost says");
    fputs(")</text>\n</svg>\n", f);
    return fflush(f) || ferror(f) ? -1 : 0;
}

/* ---- Chrome trace --------------------------------------------------------- */

/* Trace timestamps are microseconds. Times in a known unit (--costs:
 * seconds unless its "unit" says otherwise) are converted exactly; the
 * schedule's own costs have no unit, and one of its time units is shown as
 * 1 ms, so that unit costs read as 1 ms slices. */
#define TRACE_US_PER_SCHEDULE_UNIT 1000.0

/* Every name in the trace is made here from ASCII words and numbers, with
 * no '"', '\\' or control character, so it is written as it is: fprintf
 * lays the file out an event per line, which jansson's dump would not. */

/* The shortest decimal that reads back as the same double (JSON has no NaN
 * or infinity, so those print as 0). */
static void json_num(FILE *f, double x)
{
    char buf[PP_NUMFMT_MAX];
    if (!isfinite(x))
        x = 0;
    /* a short exact decimal is its own shortest round trip (numfmt.h) */
    if (pp_fmt_exact(buf, x, 15)) {
        fputs(buf, f);
        return;
    }
    snprintf(buf, sizeof buf, "%.15g", x);
    if (strtod(buf, NULL) != x)
        snprintf(buf, sizeof buf, "%.17g", x);
    fputs(buf, f);
}

/* Tracks: worker w's jobs on tid 2w, what it receives on tid 2w+1, so the
 * two sit together in the viewer. */
static void trace_meta(FILE *f, const char *what, int tid, const char *key, const char *name,
                       int sort)
{
    fprintf(f, ",\n{\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"name\":\"%s\",\"args\":{", tid, what);
    if (name)
        fprintf(f, "\"%s\":\"%s\"", key, name);
    else
        fprintf(f, "\"%s\":%d", key, sort);
    fputs("}}", f);
}

/* json_num's text at p; returns the end. */
static char *put_num(char *p, double x)
{
    if (!isfinite(x))
        x = 0;
    size_t n = pp_fmt_exact(p, x, 15);
    if (n)
        return p + n;
    n = pp_fmt_g(p, x, 15);
    if (strtod(p, NULL) != x)
        n = pp_fmt_g(p, x, 17);
    return p + n;
}

/* A job's slice: ",\n{\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"name\":\"%c(s=%d,b=%d)\",
 * \"cat\":\"%c\",\"ts\":NUM,\"dur\":NUM,\"args\":{\"s\":%d,\"b\":%d,\"d\":\"%c\"}}". */
static void trace_job(FILE *f, int tid, int d, int s, int b, double ts, double dur)
{
    char line[256 + 4 * PP_NUMFMT_MAX], *p = line;
    char c = dir_char(d);
    LIT(p, ",\n{\"ph\":\"X\",\"pid\":0,\"tid\":");
    p = put_int(p, tid);
    LIT(p, ",\"name\":\"");
    *p++ = c;
    LIT(p, "(s=");
    p = put_int(p, s);
    LIT(p, ",b=");
    p = put_int(p, b);
    LIT(p, ")\",\"cat\":\"");
    *p++ = c;
    LIT(p, "\",\"ts\":");
    p = put_num(p, ts);
    LIT(p, ",\"dur\":");
    p = put_num(p, dur);
    LIT(p, ",\"args\":{\"s\":");
    p = put_int(p, s);
    LIT(p, ",\"b\":");
    p = put_int(p, b);
    LIT(p, ",\"d\":\"");
    *p++ = c;
    LIT(p, "\"}}");
    fwrite(line, 1, (size_t)(p - line), f);
}

static int cmp_xfer(const void *a, const void *b)
{
    const pp_transfer *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->job < y->job ? -1 : x->job > y->job;
}

static int write_trace(FILE *f, const pp_jobtable *t, const pp_sim_result *sim,
                       const pp_transfer *xfer, int nxfer, const char *unit);

int pp_timeline_trace(FILE *f, const pp_jobtable *t, const pp_sim_result *sim,
                      const pp_transfer *xfer, int nxfer, const char *unit)
{
    /* the report keeps them in job order; the trace lists them by start */
    pp_transfer *sorted = malloc(((size_t)nxfer + 1) * sizeof *sorted);
    if (!sorted) {
        errno = ENOMEM;
        return -1;
    }
    if (nxfer > 0)
        memcpy(sorted, xfer, (size_t)nxfer * sizeof *sorted);
    qsort(sorted, (size_t)nxfer, sizeof *sorted, cmp_xfer);
    int rc = write_trace(f, t, sim, sorted, nxfer, unit);
    free(sorted);
    return rc;
}

static int write_trace(FILE *f, const pp_jobtable *t, const pp_sim_result *sim,
                       const pp_transfer *xfer, int nxfer, const char *unit)
{
    const pp_jobspace *js = &t->js;
    int N = job_count(js);
    double us = pp_costs_unit_us(unit);
    if (!(us > 0)) {
        unit = NULL;
        us = TRACE_US_PER_SCHEDULE_UNIT;
    }
    char name[96];
    static const char *kinds[] = {"act", "grad", "weights"};

    snprintf(name, sizeof name, "pp schedule S=%d B=%d W=%d", js->S, js->B, t->W);
    fprintf(f,
            "{\"traceEvents\":[\n{\"ph\":\"M\",\"pid\":0,\"tid\":0,\"name\":\"process_name\","
            "\"args\":{\"name\":\"%s\"}}",
            name);
    for (int w = 0; w < t->W; w++) {
        snprintf(name, sizeof name, "worker %d", w);
        trace_meta(f, "thread_name", 2 * w, "name", name, 0);
        trace_meta(f, "thread_sort_index", 2 * w, "sort_index", NULL, 2 * w);
        snprintf(name, sizeof name, "worker %d recv", w);
        trace_meta(f, "thread_name", 2 * w + 1, "name", name, 0);
        trace_meta(f, "thread_sort_index", 2 * w + 1, "sort_index", NULL, 2 * w + 1);
    }
    for (int w = 0; t->offload && w < t->W; w++) { /* offload: each worker's host-copy lane */
        snprintf(name, sizeof name, "worker %d host copies", w);
        trace_meta(f, "thread_name", 2 * t->W + w, "name", name, 0);
        trace_meta(f, "thread_sort_index", 2 * t->W + w, "sort_index", NULL, 2 * t->W + w);
    }
    for (int j = 0; j < N; j++) {
        if (!job_ok(t, sim, j))
            continue;
        int s = job_s(js, j), b = job_b(js, j), d = job_d(js, j);
        trace_job(f, 2 * t->worker[j], d, s, b, sim->start[j] * us,
                  (sim->end[j] - sim->start[j]) * us);
    }
    for (int i = 0; t->offload && sim->off_start && i < js->S * js->B; i++) {
        if (!t->offload[i])
            continue;
        int s = i / js->B, b = i % js->B, tid = 2 * t->W + t->worker[job_id(js, s, b, DIR_F)];
        double at[2] = {sim->off_start[i], sim->rel_start[i]};
        double to[2] = {sim->off_end[i], sim->rel_end[i]};
        for (int k = 0; k < 2; k++) {
            fprintf(f, ",\n{\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"name\":\"%s (s=%d,b=%d)\","
                       "\"cat\":\"host\",\"ts\":",
                    tid, k ? "reload" : "offload", s, b);
            json_num(f, at[k] * us);
            fputs(",\"dur\":", f);
            json_num(f, (to[k] - at[k]) * us);
            fputc('}', f);
        }
    }
    for (int i = 0; i < nxfer; i++) {
        const pp_transfer *x = &xfer[i];
        if (x->dst < 0 || x->dst >= t->W)
            continue;
        const char *kind = x->kind >= XFER_ACT && x->kind <= XFER_WEIGHT ? kinds[x->kind] : "xfer";
        double dur = x->end - x->start;
        /* ",\n{\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"name\":\"%s %c(s=%d,b=%d)\"
         * (or the kind alone),\"cat\":\"%s\",\"ts\":NUM,\"dur\":NUM,
         * \"args\":{\"from\":%d,\"bytes\":%llu}}", by hand as trace_job */
        char line[256 + 4 * PP_NUMFMT_MAX], *p = line;
        LIT(p, ",\n{\"ph\":\"X\",\"pid\":0,\"tid\":");
        p = put_int(p, 2 * x->dst + 1);
        LIT(p, ",\"name\":\"");
        p = stpcpy(p, kind);
        if (x->job >= 0 && x->job < N) {
            *p++ = ' ';
            *p++ = dir_char(job_d(js, x->job));
            LIT(p, "(s=");
            p = put_int(p, job_s(js, x->job));
            LIT(p, ",b=");
            p = put_int(p, job_b(js, x->job));
            *p++ = ')';
        }
        LIT(p, "\",\"cat\":\"");
        p = stpcpy(p, kind);
        LIT(p, "\",\"ts\":");
        p = put_num(p, x->start * us);
        LIT(p, ",\"dur\":");
        p = put_num(p, (dur > 0 ? dur : 0) * us);
        LIT(p, ",\"args\":{\"from\":");
        p = put_int(p, x->src);
        LIT(p, ",\"bytes\":");
        p += pp_fmt_u64(p, x->bytes);
        LIT(p, "}}");
        fwrite(line, 1, (size_t)(p - line), f);
    }
    /* What a microsecond here is, for people and tools reading the file. */
    fputs("\n],\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"ts_unit\":\"us\",\"source_unit\":\"",
          f);
    fputs(unit ? unit : "schedule time unit", f);
    fputs("\",\"us_per_source_unit\":", f);
    json_num(f, us);
    fprintf(f, ",\"note\":\"ts and dur are microseconds: %s\"}}\n",
            unit ? "the --costs times converted from their unit"
                 : "the schedule's costs have no unit, 1 of them is shown as 1 ms");
    return fflush(f) || ferror(f) ? -1 : 0;
}

/* ---- ASCII ---------------------------------------------------------------- */

/* Column positions within `tol` of a whole column are taken as whole, so
 * times like 0.001 * k (measured seconds) land on the same columns as k. */
static double snap_to(double x, double tol)
{
    double r = nearbyint(x);
    return fabs(x - r) < tol ? r : x;
}

/* The exact layouts' tolerance: a job edge within 1e-6 of a column edge is
 * on it. */
static double snap(double x) { return snap_to(x, 1e-6); }

/* The scaled layout's: only rounding noise. Its columns span up to 1e12
 * shortest jobs, so 1e-6 of one can be whole jobs, which snap() would move
 * off the end or out of their column. A simulated time is a chain of at
 * most N additions, each off by half an ulp, so the noise in `cols`
 * columns is at most N * DBL_EPSILON * cols (4e-11 for 1F1B S=16 B=64's
 * 2048 jobs in 79 columns; 1e-9 is the least taken). */
static double scaled_tol(int N, double cols) { return fmax(1e-9, (double)N * DBL_EPSILON * cols); }

/* Writes `text` word-wrapped to `width` columns (a legend must not break the
 * width promise either). */
static void wrap(FILE *f, const char *text, int width)
{
    int col = 0;
    while (*text) {
        int n = (int)strcspn(text, " ");
        if (col > 0 && col + 1 + n > width) {
            fputc('\n', f);
            col = 0;
        } else if (col > 0) {
            fputc(' ', f);
            col++;
        }
        fwrite(text, 1, (size_t)n, f);
        col += n;
        text += n;
        while (*text == ' ')
            text++;
    }
    fputc('\n', f);
}

/* How the diagram spends its columns (choose_layout). */
enum { ASCII_LABELS, ASCII_LETTERS, ASCII_SCALED };

typedef struct {
    int mode;   /* ASCII_* */
    double cpu; /* columns per time unit */
    int ncols;  /* columns for the whole makespan */
    int band;   /* columns per band: the rows run on through bands, one under another */
    int nbands;
    int fine;   /* every job spans at least two columns: a shared column shows its majority */
    int cell;   /* ASCII_LABELS: columns of the shortest job, its label and a space */
    double tol; /* column positions this close to a whole column are on it */
    int stages; /* some worker runs several stages: labels say the stage, "F1.3" */
} ascii_layout;

/* Whether some worker runs jobs of more than one stage (interleaved,
 * looped and data-parallel schedules): then a label without the stage
 * ("F0 F1 F0 F1") would not say which chunk runs. */
static int several_stages(const pp_jobtable *t, const pp_sim_result *sim)
{
    const pp_jobspace *js = &t->js;
    int N = job_count(js), *first = malloc((size_t)t->W * sizeof *first), several = 0;
    if (!first)
        return 0;
    for (int w = 0; w < t->W; w++)
        first[w] = -1;
    for (int j = 0; j < N && !several; j++) {
        if (!job_ok(t, sim, j))
            continue;
        int w = t->worker[j], s = job_s(js, j);
        if (first[w] < 0)
            first[w] = s;
        else if (first[w] != s)
            several = 1;
    }
    free(first);
    return several;
}

/* Column symbols other than a job id. */
enum { SYM_IDLE = -1, SYM_MIXED = -2, SYM_PART = -3, SYM_SEVERAL = -4 /* - direction */ };

/* Whether every drawable job starts and ends on a whole number of columns
 * of `k` time units (within 1e-6 of one, so that measured seconds like
 * 0.003 * n count), so that no column splits a job. */
static int exact_at(const pp_jobtable *t, const pp_sim_result *sim, double k)
{
    for (int j = 0; j < job_count(&t->js); j++) {
        if (!job_ok(t, sim, j))
            continue;
        double a = sim->start[j] / k, b = sim->end[j] / k;
        if (fabs(a - nearbyint(a)) > 1e-6 || fabs(b - nearbyint(b)) > 1e-6)
            return 0;
    }
    return 1;
}

/* 1, 2 or 5 times a power of ten: the largest not above x. */
static double nice_down(double x)
{
    double p = pow(10, floor(log10(x)));
    return x >= 5 * p ? 5 * p : x >= 2 * p ? 2 * p : p;
}

/* The bands a diagram of W rows may take: more rows, fewer bands, so that
 * report.txt of a 65536-worker DDP stays one row per worker. */
static int max_bands(int W) { return W <= 64 ? 4 : W <= 128 ? 2 : 1; }

static int bands_of(int ncols, int band)
{
    return ncols > 0 && band > 0 ? (ncols + band - 1) / band : 1;
}

/* The most faithful picture that fits in max_bands bands of `avail`
 * columns: exact with labels (the shortest job gets "F3 "); else exact with
 * a column per grain, the widest column that splits no job (the shortest
 * job, or a tenth of it at the least: F 3 and B 5 take columns of 1); else
 * time scaled by 1, 2 or 5 times a power of ten (times the grain, so that
 * column edges stay on job edges where they can). */
static void choose_layout(ascii_layout *L, const pp_jobtable *t, const pp_sim_result *sim,
                          int avail, double M)
{
    const pp_jobspace *js = &t->js;
    double u = min_cost(t, sim), grain = 0;
    int mb = max_bands(t->W);
    memset(L, 0, sizeof *L);
    L->stages = several_stages(t, sim);
    L->cell = 2 + digits(js->B > 0 ? js->B - 1 : 0) +
              (L->stages ? 1 + digits(js->S > 0 ? js->S - 1 : 0) : 0);
    L->fine = 1;
    L->tol = 1e-6;
    if (avail >= L->cell && exact_at(t, sim, u / L->cell)) {
        L->mode = ASCII_LABELS;
        L->cpu = L->cell / u;
        L->band = avail / L->cell * L->cell; /* bands break between cells */
        double cols = nearbyint(snap(M * L->cpu));
        if (cols <= (double)mb * L->band) { /* before it is an int */
            L->ncols = (int)cols;
            L->nbands = bands_of(L->ncols, L->band);
            return;
        }
    }
    for (int m = 1; m <= 10 && !grain; m++)
        if (exact_at(t, sim, u / m))
            grain = u / m;
    L->band = avail;
    if (grain > 0) {
        L->mode = ASCII_LETTERS;
        L->cpu = 1 / grain;
        double cols = nearbyint(snap(M * L->cpu));
        if (cols <= (double)mb * L->band) {
            L->ncols = (int)cols;
            L->nbands = bands_of(L->ncols, L->band);
            return;
        }
    }
    /* Scaled: from a grain (or half the shortest job, so that every job
     * still fills a whole column) up, until the bands hold it. */
    L->mode = ASCII_SCALED;
    int N = job_count(js);
    double base = grain > 0 ? grain : nice_down(u / 2), k = base;
    static const double m[3] = {1, 2, 5};
    for (int i = 0; i < 3 * 40; i++) {
        k = base * m[i % 3] * pow(10, i / 3);
        if (ceil(snap_to(M / k, scaled_tol(N, M / k))) <= (double)mb * avail)
            break;
    }
    L->cpu = 1 / k;
    L->tol = scaled_tol(N, M * L->cpu);
    double cols = M > 0 ? ceil(snap_to(M * L->cpu, L->tol)) : 0;
    L->ncols = cols < (double)mb * avail ? (int)cols : mb * avail;
    L->nbands = bands_of(L->ncols, L->band);
    L->fine = grain > 0 ? k == grain : k <= u / 2 * (1 + 1e-9);
}

/* A job's run of columns [c, c+n) in a band, as labelled cells: its label
 * and '-' over what runs past one cell, then a space; a run cut at the
 * band's end continues with '-' in the next band. Too narrow for the
 * label, its direction letter in every column. */
static void draw_labelled(char *p, int n, const char *l, int ln, char dir, int starts, int ends,
                          int cell)
{
    if (!starts) {
        memset(p, '-', (size_t)n);
        if (ends && n > 1)
            p[n - 1] = ' ';
    } else if (n >= ln + ends) {
        memset(p, ' ', (size_t)n);
        memcpy(p, l, (size_t)ln);
        if (!ends)
            memset(p + ln, '-', (size_t)(n - ln));
        else if (n > cell)
            memset(p + ln, '-', (size_t)(n - ln - 1));
    } else
        memset(p, dir, (size_t)n);
}

/* Idle run of the labelled picture: ".. .. ", so that a bubble can be
 * counted in shortest jobs; a run that is not a whole number of cells gives
 * its extra columns to its last chunk. Each chunk ends in a space, which
 * separates the run from the label that follows. */
static void draw_idle_cells(char *p, int n, int cell)
{
    memset(p, '.', (size_t)n);
    if (n >= cell) {
        for (int i = cell - 1; i < n - cell; i += cell)
            p[i] = ' ';
        p[n - 1] = ' ';
    } else if (n > 1)
        p[n - 1] = ' ';
}

/* The time ruler over columns [c0, c0 + len): tick labels start at the
 * first column of their time. */
static void ruler(FILE *f, int prefix, int c0, int len, double M, double cpu)
{
    fprintf(f, "%*s", prefix, "");
    if (M > 0 && len > 0) {
        double step = tick_step(M, cpu, 2, 1);
        char buf[4096];
        if (len > (int)sizeof buf - 1)
            len = (int)sizeof buf - 1;
        memset(buf, ' ', (size_t)len);
        int used = 0;
        long k = (long)floor(c0 / cpu / step);
        for (; k * step <= M * (1 + 1e-12) && k < 100000000L; k++) {
            char num[40];
            int n = snprintf(num, sizeof num, "%g", k * step);
            int at = (int)nearbyint(snap(k * step * cpu)) - c0;
            if (at >= len)
                break;
            if (at < used)
                continue;
            if (at + n > len)
                break;
            memcpy(buf + at, num, (size_t)n);
            used = at + n + 1;
        }
        while (used > 0 && buf[used - 1] == ' ')
            used--;
        fwrite(buf, 1, (size_t)(used > len ? len : used), f);
    }
    fputc('\n', f);
}

void pp_timeline_ascii(FILE *f, const pp_jobtable *t, const pp_sim_result *sim, int width)
{
    const pp_jobspace *js = &t->js;
    int N = job_count(js), W = t->W;
    double M = safe_makespan(sim);
    /* Row = "w<n>" padded, " |", the cells, "|". */
    int wdig = digits(W > 0 ? W - 1 : 0), prefix = 1 + wdig + 2;
    int avail = width - prefix - 1;
    if (avail < 1)
        avail = 1;
    ascii_layout L;
    choose_layout(&L, t, sim, avail, M);
    int ncols = L.ncols;

    /* For each (worker, column): the job covering most of it, how much, how
     * much is busy in all, and the directions of the jobs in it. */
    size_t ncell = (size_t)W * (size_t)(ncols > 0 ? ncols : 1);
    int *best = malloc(ncell * sizeof *best), *sym = malloc(ncell * sizeof *sym);
    double *cover = calloc(ncell, sizeof *cover), *busy = calloc(ncell, sizeof *busy);
    unsigned char *dirs = calloc(ncell, 1);
    char *row = malloc((size_t)L.band + 2);
    if (!best || !sym || !cover || !busy || !dirs || !row) {
        fputs("(timeline: out of memory)\n", f);
        goto out;
    }
    for (size_t i = 0; i < ncell; i++)
        best[i] = -1;
    for (int j = 0; j < N; j++) {
        if (!job_ok(t, sim, j))
            continue;
        double a = snap_to(sim->start[j] * L.cpu, L.tol), b = snap_to(sim->end[j] * L.cpu, L.tol);
        int w = t->worker[j];
        if (!(b > a) && sim->end[j] > sim->start[j] && ncols > 0) {
            /* A job far shorter than a column, snapped to no width: it
             * still ran, in the column it starts in. */
            int c = a < ncols ? (int)floor(a) : ncols - 1;
            dirs[(size_t)w * (size_t)ncols + (size_t)(c > 0 ? c : 0)] |=
                (unsigned char)(1u << job_d(js, j));
            continue;
        }
        for (int c = (int)floor(a); c < ncols && c < (int)ceil(b); c++) {
            if (c < 0)
                continue;
            double ov = fmin(b, c + 1.0) - fmax(a, (double)c);
            size_t k = (size_t)w * (size_t)ncols + (size_t)c;
            busy[k] += ov;
            dirs[k] |= (unsigned char)(1u << job_d(js, j));
            if (ov > cover[k]) {
                cover[k] = ov;
                best[k] = j;
            }
        }
    }
    /* What each column shows: a job that fills it, or idle time that does;
     * else (fine) whichever covers most of it; else (coarse) what shares it.
     * A coarse column where jobs ran is never idle, however little of it
     * they took (dirs says one ran): they may be all a worker did. */
    const double eps = 1e-6;
    for (size_t k = 0; k < (size_t)W * (size_t)ncols; k++) {
        double idle = 1 - busy[k];
        if (best[k] >= 0 && cover[k] >= 1 - eps)
            sym[k] = best[k];
        else if (busy[k] <= eps && (L.fine || !dirs[k]))
            sym[k] = SYM_IDLE;
        else if (L.fine)
            sym[k] = cover[k] >= idle ? best[k] : SYM_IDLE;
        else if (idle > eps)
            sym[k] = SYM_PART;
        else if (dirs[k] == 1 || dirs[k] == 2 || dirs[k] == 4 || dirs[k] == 8) /* 8: R jobs */
            sym[k] = SYM_SEVERAL - (dirs[k] == 1 ? 0 : dirs[k] == 2 ? 1 : dirs[k] == 4 ? 2 : 3);
        else
            sym[k] = SYM_MIXED;
    }

    char line[256];
    if (L.mode != ASCII_LABELS || L.nbands > 1) {
        double k = 1 / L.cpu;
        if (L.mode == ASCII_LABELS)
            snprintf(line, sizeof line, "%d columns = the shortest job (%g time unit%s)", L.cell,
                     k * L.cell, k * L.cell == 1 ? "" : "s");
        else
            snprintf(line, sizeof line, "1 column = %g time unit%s", k, k == 1 ? "" : "s");
        if (L.nbands > 1) {
            size_t n = strlen(line);
            snprintf(line + n, sizeof line - n,
                     "; time runs on through %d bands, one under another", L.nbands);
        }
        wrap(f, line, width > 1 ? width : 1);
    }
    for (int band = 0; band < L.nbands; band++) {
        int c0 = band * L.band, c1 = c0 + L.band < ncols ? c0 + L.band : ncols;
        if (band > 0)
            fputc('\n', f);
        ruler(f, prefix, c0, width - prefix, M, L.cpu);
        for (int w = 0; w < W; w++) {
            const int *sw = sym + (size_t)w * (size_t)ncols;
            int c = c0;
            while (c < c1) {
                int j = sw[c], n = 1;
                while (c + n < c1 && sw[c + n] == j)
                    n++;
                char *p = row + (c - c0);
                int starts = !(c == c0 && c0 > 0 && sw[c - 1] == j);
                int ends = !(c + n == c1 && c1 < ncols && sw[c1] == j);
                if (j >= 0) {
                    char dir = dir_char(job_d(js, j));
                    if (L.mode == ASCII_LABELS) {
                        char l[16];
                        int ln = L.stages ? snprintf(l, sizeof l, "%c%d.%d", dir, job_s(js, j),
                                                     job_b(js, j))
                                          : snprintf(l, sizeof l, "%c%d", dir, job_b(js, j));
                        draw_labelled(p, n, l, ln, dir, starts, ends, L.cell);
                    } else {
                        memset(p, '-', (size_t)n);
                        if (starts)
                            p[0] = dir;
                    }
                } else if (j == SYM_IDLE && L.mode == ASCII_LABELS)
                    draw_idle_cells(p, n, L.cell);
                else
                    memset(p,
                           j == SYM_IDLE    ? '.'
                           : j == SYM_MIXED ? '*'
                           : j == SYM_PART  ? ':'
                                            : dir_char(SYM_SEVERAL - j) + ('a' - 'A'),
                           (size_t)n);
                c += n;
            }
            row[c1 - c0] = '\0';
            fprintf(f, "w%-*d |%s|\n", wdig, w, row);
        }
    }

    if (L.mode == ASCII_LABELS && L.stages)
        snprintf(line, sizeof line,
                 "cells: F/B/W, stage and microbatch (B1.3 = backward of stage 1, microbatch 3), "
                 "'-' continues a cell, '.' idle; columns per time unit: %g",
                 L.cpu);
    else if (L.mode == ASCII_LABELS)
        snprintf(line, sizeof line,
                 "cells: F/B/W and microbatch (B3 = backward of microbatch 3), '-' continues a "
                 "cell, '.' idle; columns per time unit: %g",
                 L.cpu);
    else if (L.fine)
        snprintf(line, sizeof line,
                 "cells: F/B/W is a job's first column, '-' its others, '.' idle; %s",
                 L.mode == ASCII_LETTERS ? "every job and gap drawn to scale"
                                         : "a column shows what covers most of it, so an edge "
                                           "is off by at most one column");
    else
        snprintf(line, sizeof line,
                 "cells: F/B/W is the first column a job fills, '-' its others; where jobs share "
                 "a column, 'f'/'b'/'w' several of one direction, '*' of several directions, ':' "
                 "jobs and idle time; '.' idle");
    wrap(f, line, width > 1 ? width : 1);
    if (js->recompute) /* recompute: R cells, 'r' where several share a column */
        wrap(f, "R: a forward re-run to rebuild its stash before its backward (recompute)",
             width > 1 ? width : 1);
out:
    free(row);
    free(dirs);
    free(busy);
    free(cover);
    free(sym);
    free(best);
}
