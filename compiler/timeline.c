/* timeline.c - pictures of a simulated schedule (see timeline.h): the
 * seed's pipeline diagram as SVG (cells coloured by microbatch, labelled
 * with direction and stage), the same diagram as fixed-width text for
 * report.txt, and a Chrome trace event file with a track per worker for its
 * jobs and one for the transfers it receives.
 *
 * Times are doubles in the simulator's unit (1 per job by default, but any
 * positive reals, e.g. measured seconds). Every renderer iterates jobs by id
 * rather than by sim->order, so a partial (deadlocked) result cannot make a
 * job appear twice, and skips jobs whose times are not finite. */
#include "timeline.h"

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
    SVG_ROW = 14,      /* px per worker row */
    SVG_CELL_H = 12,   /* the 2 px left over separate the rows */
    SVG_TOP = 40,      /* title and legend */
    SVG_AXIS = 28,     /* time axis below the rows */
    SVG_PALETTE = 16,  /* hues; microbatch b gets hue b mod 16 */
};
#define SVG_UNIT_PX 26.0  /* px for the shortest job, room for "F12" */
#define SVG_MAX_PLOT 2400.0 /* plot width cap, so 64 x 256 stays a few thousand px */
#define SVG_MIN_PLOT 320.0
#define SVG_CHAR_PX 5.6   /* width of one glyph of the 9px label font, generously */

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* A coordinate with at most two decimals and no trailing zeros: px are
 * only drawn that finely, and it keeps a 32768-cell file small. */
static void px(FILE *f, double x)
{
    char buf[48];
    if (!isfinite(x) || fabs(x) < 0.005)
        x = 0;
    snprintf(buf, sizeof buf, "%.2f", x);
    char *e = buf + strlen(buf);
    while (e[-1] == '0')
        *--e = '\0';
    if (e[-1] == '.')
        e[-1] = '\0';
    fputs(buf, f);
}

int pp_timeline_svg(FILE *f, const pp_jobtable *t, const pp_sim_result *sim)
{
    const pp_jobspace *js = &t->js;
    int N = job_count(js), W = t->W;
    double M = safe_makespan(sim);
    double unit = min_cost(t, sim);
    /* px per time unit: the shortest job gets room for its label unless that
     * makes the plot too wide; then everything is scaled down together. */
    double scale = M > 0 ? fmin(SVG_UNIT_PX / unit, SVG_MAX_PLOT / M) : 1;
    if (M > 0 && M * scale < SVG_MIN_PLOT)
        scale = SVG_MIN_PLOT / M;
    double left = 14 + 7.0 * (1 + digits(W > 0 ? W - 1 : 0));
    double plot = M * scale;
    double width = fmax(left + plot + 24, 640);
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
    fputs("</style>\n<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n", f);

    char line[256];
    snprintf(line, sizeof line, "pipeline timeline: S=%d B=%d W=%d, makespan %g", js->S, js->B, W,
             M);
    fputs("<text x=\"8\" y=\"15\">", f);
    xml_text(f, line);
    fputs("</text>\n<text x=\"8\" y=\"31\">", f);
    snprintf(line, sizeof line,
             "colour: microbatch (%d hues, cycling); shade: F light, B darker%s; "
             "label: direction and stage; white: idle",
             SVG_PALETTE, js->ND == 3 ? ", W darkest" : "");
    xml_text(f, line);
    fputs("</text>\n", f);

    for (int w = 0; w < W; w++)
        fprintf(f, "<text class=\"wl\" x=\"%d\" y=\"%d\">w%d</text>\n", (int)left - 5,
                SVG_TOP + w * SVG_ROW + 10, w);

    /* One rect per job; its label only when it fits inside the cell. */
    for (int j = 0; j < N; j++) {
        if (!job_ok(t, sim, j))
            continue;
        int s = job_s(js, j), b = job_b(js, j), d = job_d(js, j), w = t->worker[j];
        double x = left + sim->start[j] * scale, cw = (sim->end[j] - sim->start[j]) * scale;
        int y = SVG_TOP + w * SVG_ROW + (SVG_ROW - SVG_CELL_H) / 2;
        fprintf(f, "<rect class=\"j %c%d\" x=\"", dir_char(d), b % SVG_PALETTE);
        px(f, x);
        fprintf(f, "\" y=\"%d\" width=\"", y);
        px(f, cw);
        fprintf(f, "\" height=\"%d\"><title>%c(s=%d,b=%d) on w%d: %g to %g</title></rect>\n",
                SVG_CELL_H, dir_char(d), s, b, w, sim->start[j], sim->end[j]);
        char lab[16];
        int n = snprintf(lab, sizeof lab, "%c%d", dir_char(d), s);
        if (cw >= n * SVG_CHAR_PX + 3) {
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
    fputs("</svg>\n", f);
    return fflush(f) || ferror(f) ? -1 : 0;
}

/* ---- Chrome trace --------------------------------------------------------- */

/* One time unit is taken as 1 ms: trace timestamps are in microseconds, so
 * times are multiplied by 1000 (unit costs then read as 1 ms slices). */
#define TRACE_US_PER_UNIT 1000.0

/* Every name in the trace is made here from ASCII words and numbers, with
 * no '"', '\\' or control character, so it is written as it is: fprintf
 * lays the file out an event per line, which jansson's dump would not. */

/* The shortest decimal that reads back as the same double (JSON has no NaN
 * or infinity, so those print as 0). */
static void json_num(FILE *f, double x)
{
    char buf[40];
    if (!isfinite(x))
        x = 0;
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

int pp_timeline_trace(FILE *f, const pp_jobtable *t, const pp_sim_result *sim,
                      const pp_transfer *xfer, int nxfer)
{
    const pp_jobspace *js = &t->js;
    int N = job_count(js);
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
    for (int j = 0; j < N; j++) {
        if (!job_ok(t, sim, j))
            continue;
        int s = job_s(js, j), b = job_b(js, j), d = job_d(js, j);
        fprintf(f, ",\n{\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"name\":\"%c(s=%d,b=%d)\",\"cat\":\"%c\",\"ts\":",
                2 * t->worker[j], dir_char(d), s, b, dir_char(d));
        json_num(f, sim->start[j] * TRACE_US_PER_UNIT);
        fputs(",\"dur\":", f);
        json_num(f, (sim->end[j] - sim->start[j]) * TRACE_US_PER_UNIT);
        fprintf(f, ",\"args\":{\"s\":%d,\"b\":%d,\"d\":\"%c\"}}", s, b, dir_char(d));
    }
    for (int i = 0; i < nxfer; i++) {
        const pp_transfer *x = &xfer[i];
        if (x->dst < 0 || x->dst >= t->W)
            continue;
        const char *kind = x->kind >= XFER_ACT && x->kind <= XFER_WEIGHT ? kinds[x->kind] : "xfer";
        if (x->job >= 0 && x->job < N)
            snprintf(name, sizeof name, "%s %c(s=%d,b=%d)", kind, dir_char(job_d(js, x->job)),
                     job_s(js, x->job), job_b(js, x->job));
        else
            snprintf(name, sizeof name, "%s", kind);
        double dur = x->end - x->start;
        fprintf(f, ",\n{\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"name\":\"%s\",\"cat\":\"%s\",\"ts\":",
                2 * x->dst + 1, name, kind);
        json_num(f, x->start * TRACE_US_PER_UNIT);
        fputs(",\"dur\":", f);
        json_num(f, (dur > 0 ? dur : 0) * TRACE_US_PER_UNIT);
        fprintf(f, ",\"args\":{\"from\":%d,\"bytes\":%llu}}", x->src, (unsigned long long)x->bytes);
    }
    fputs("\n],\"displayTimeUnit\":\"ms\"}\n", f);
    return fflush(f) || ferror(f) ? -1 : 0;
}

/* ---- ASCII ---------------------------------------------------------------- */

/* Column positions within 1e-6 of a whole column are taken as whole, so
 * times like 0.001 * k (measured seconds) land on the same columns as k. */
static double snap(double x)
{
    double r = nearbyint(x);
    return fabs(x - r) < 1e-6 ? r : x;
}

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
    /* A cell is its label (direction and microbatch) plus a separating
     * space; the shortest job gets exactly one cell, so with integer
     * multiples of it every job boundary falls on a column boundary and the
     * picture is exact. Only when that is too wide is time scaled down. */
    int lab = 1 + digits(js->B > 0 ? js->B - 1 : 0), cell = lab + 1;
    double cpu = cell / min_cost(t, sim); /* columns per time unit */
    int exact = 1;
    if (M > 0 && M * cpu > avail + 1e-9) {
        cpu = avail / M;
        exact = 0;
    }
    int ncols = M > 0 ? (int)ceil(snap(M * cpu)) : 0;
    if (ncols > avail)
        ncols = avail;

    /* For each (worker, column) the job covering most of it. */
    size_t ncell = (size_t)W * (size_t)(ncols > 0 ? ncols : 1);
    int *best = malloc(ncell * sizeof *best);
    double *cover = calloc(ncell, sizeof *cover), *busy = calloc(ncell, sizeof *busy);
    char *row = malloc((size_t)ncols + 2);
    if (!best || !cover || !busy || !row) {
        fputs("(timeline: out of memory)\n", f);
        goto out;
    }
    for (size_t i = 0; i < ncell; i++)
        best[i] = -1;
    for (int j = 0; j < N; j++) {
        if (!job_ok(t, sim, j))
            continue;
        double a = snap(sim->start[j] * cpu), b = snap(sim->end[j] * cpu);
        int w = t->worker[j];
        for (int c = (int)floor(a); c < ncols && c < (int)ceil(b); c++) {
            if (c < 0)
                continue;
            double ov = fmin(b, c + 1.0) - fmax(a, (double)c);
            size_t k = (size_t)w * (size_t)ncols + (size_t)c;
            busy[k] += ov;
            if (ov > cover[k]) {
                cover[k] = ov;
                best[k] = j;
            }
        }
    }

    /* Ruler: tick labels start at the first column of their time. */
    memset(row, ' ', (size_t)ncols + 1);
    row[ncols + 1] = '\0';
    fprintf(f, "%*s", prefix, "");
    if (M > 0) {
        double step = tick_step(M, cpu, 2, 1);
        char ruler[4096];
        int len = width - prefix < (int)sizeof ruler - 1 ? width - prefix : (int)sizeof ruler - 1;
        if (len < 0)
            len = 0;
        memset(ruler, ' ', (size_t)len);
        int used = 0;
        for (long k = 0; k * step <= M * (1 + 1e-12) && k < 100000; k++) {
            char num[40];
            int n = snprintf(num, sizeof num, "%g", k * step);
            int at = (int)nearbyint(snap(k * step * cpu));
            if (at < used || at + n > len)
                continue;
            memcpy(ruler + at, num, (size_t)n);
            used = at + n + 1;
        }
        while (used > 0 && ruler[used - 1] == ' ')
            used--;
        fwrite(ruler, 1, (size_t)(used > len ? len : used), f);
    }
    fputc('\n', f);

    for (int w = 0; w < W; w++) {
        const int *bw = best + (size_t)w * (size_t)ncols;
        const double *cw = cover + (size_t)w * (size_t)ncols, *uw = busy + (size_t)w * (size_t)ncols;
        int c = 0;
        while (c < ncols) {
            /* a column is idle when idle time covers more of it than any job */
            int j = bw[c] >= 0 && cw[c] >= 1 - uw[c] - 1e-9 ? bw[c] : -1, n = 1;
            while (c + n < ncols) {
                int k = c + n;
                int jk = bw[k] >= 0 && cw[k] >= 1 - uw[k] - 1e-9 ? bw[k] : -1;
                if (jk != j)
                    break;
                n++;
            }
            char *p = row + c;
            if (j < 0) {
                /* Idle. In exact mode it reads in cells, ".. .. ", so a
                 * bubble can be counted in shortest jobs; a run that is not
                 * a whole number of cells gives its extra columns to its
                 * last chunk. Each chunk ends in a space, which separates
                 * the run from the label that follows. */
                memset(p, '.', (size_t)n);
                if (exact && n >= cell) {
                    for (int i = cell - 1; i < n - cell; i += cell)
                        p[i] = ' ';
                    p[n - 1] = ' ';
                } else if (exact && n > 1)
                    p[n - 1] = ' ';
            } else {
                /* A job: its label, '-' over whatever it runs past one cell
                 * (scaled, past two: rounding makes equal jobs differ by a
                 * column, which should not make some of them dashed), and a
                 * separating space; too narrow for the label, its direction
                 * letter in every column. */
                char l[16];
                int ln = snprintf(l, sizeof l, "%c%d", dir_char(job_d(js, j)), job_b(js, j));
                if (n >= ln + 1) {
                    memset(p, ' ', (size_t)n);
                    memcpy(p, l, (size_t)ln);
                    if (exact ? n > cell : n >= 2 * cell)
                        memset(p + ln, '-', (size_t)(n - ln - 1));
                } else
                    memset(p, dir_char(job_d(js, j)), (size_t)n);
            }
            c += n;
        }
        row[ncols] = '\0';
        fprintf(f, "w%-*d |%s|\n", wdig, w, row);
    }

    char legend[256];
    if (exact)
        snprintf(legend, sizeof legend,
                 "cells: F/B/W and microbatch (B3 = backward of microbatch 3), '-' continues a "
                 "cell, '.' idle; columns per time unit: %g",
                 cpu);
    else
        snprintf(legend, sizeof legend,
                 "cells: F/B/W and microbatch where wide enough, else the direction of the job "
                 "covering most of the column; '.' idle; 1 column = %.3g time units",
                 1 / cpu);
    wrap(f, legend, width > 1 ? width : 1);
out:
    free(row);
    free(busy);
    free(cover);
    free(best);
}
