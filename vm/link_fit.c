/* link_fit.c - the link probe's fits (link_fit.h). */
#include "link_fit.h"

#include <math.h>

void pp_link_fit(double t0, size_t m1, double t1, size_t m2, double t2, double *bandwidth,
                 double *burst)
{
    *burst = 0;
    if (t2 > t1 && m2 > m1) {
        *bandwidth = (double)(m2 - m1) / (t2 - t1);
        double b = (double)m1 - *bandwidth * (t1 - t0);
        *burst = b > 0 ? (b < (double)m1 ? b : (double)m1) : 0;
    } else {
        *bandwidth = (double)m2 / (t2 > t0 ? t2 - t0 : t2);
    }
}

int pp_link_burst_seen(double t0, size_t m, double tm, double bandwidth)
{
    return bandwidth > 0 && tm - t0 < 0.5 * (double)m / bandwidth;
}

/* n bytes in `msgs` messages back to back from one sender's full bucket */
static double sent(double n, int msgs, double latency, double bandwidth, double burst)
{
    double paid = n > burst ? n - burst : 0;
    return msgs * latency + (bandwidth > 0 ? paid / bandwidth : 0);
}

int pp_link_half_duplex(double t, double n, double latency, double bandwidth, double burst)
{
    double full = sent(n, 1, latency, bandwidth, burst),
           half = sent(2 * n, 1, latency, bandwidth, burst);
    return t > 0 && full > 0 && half > full && fabs(log(t / half)) < fabs(log(t / full));
}

int pp_allreduce_is_tree(double t, double n, int R, double latency, double bandwidth, double burst)
{
    double ring = sent(2.0 * (R - 1) * n / R, 2 * (R - 1), latency, bandwidth, burst);
    double tree = 2 * ceil(log2((double)R)) * sent(n, 1, latency, bandwidth, burst);
    return t > 0 && ring > 0 && tree > 0 && fabs(log(t / tree)) < fabs(log(t / ring));
}
