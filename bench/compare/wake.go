package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// Long-poll wake-up phases of block K: how soon a waiting pop is answered
// once the push that feeds it is committed.
const (
	phWakeRegina = "wake_regina"
	phWakeQueen  = "wake_queen"
)

// wakeSamples is how many push/pop pairs a wake phase times.
const wakeSamples = 200

// wakeSettle is how long a wake sample lets its pop reach the broker and
// park before the push is sent: the API has no "I am waiting" answer, and a
// pop that arrives after the push would time a plain pop, not a wake-up.
const wakeSettle = 30 * time.Millisecond

// wake times long-poll wake-ups on a fresh queue at url: for each sample a
// consumer's pop (wait=true, autoAck, one partition) waits, one message is
// pushed to that partition, and the latency is from the push's answer (its
// commit) to the pop's answer, 0 when the pop was answered first (the
// waiting pop is woken at the commit, before the push's answer is written).
// PhaseResult.P50/P99 hold it; Ops counts the samples, Errors the samples
// whose pop was not answered with the pushed message.
func (h *harness) wake(name, url, queue string, r int) {
	h.logf("  %-26s round %d: %d samples, one pop waiting on one partition, then one push", name, r+1, wakeSamples)
	push := newHTTPClient(url)
	defer push.hc.CloseIdleConnections()
	pop := newHTTPClient(url)
	defer pop.hc.CloseIdleConnections()
	popURI := url + "/api/v1/pop/queue/" + queue + "/partition/w?batch=1&wait=true&timeout=5000&autoAck=true"
	tag := h.phaseTag(r, name)
	var lat []uint32
	var errs int64
	var sample string
	fail := func(err error) {
		errs++
		if sample == "" {
			sample = err.Error()
		}
	}
	start := time.Now()
	for i := 0; i < wakeSamples && h.stop.Err() == nil; i++ {
		popped := make(chan time.Time, 1)
		popErr := make(chan error, 1)
		go func() {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.Header.SetMethod(fasthttp.MethodGet)
			req.SetRequestURI(popURI)
			err := pop.hc.Do(req, resp)
			at := time.Now()
			switch {
			case err != nil:
				popErr <- err
			case resp.StatusCode() != http.StatusOK:
				popErr <- fmt.Errorf("pop: HTTP %d: %s", resp.StatusCode(), tailString(string(resp.Body()), 200))
			case !strings.Contains(string(resp.Body()), tag):
				popErr <- fmt.Errorf("pop answered without the pushed message: %s", tailString(string(resp.Body()), 200))
			default:
				popped <- at
			}
		}()
		time.Sleep(wakeSettle)
		body := fmt.Appendf(nil, `{"items":[{"queue":%q,"partition":"w","transactionId":"%s-%d","payload":{"n":%d}}]}`, queue, tag, i, i)
		ans := push.push(body, 1)
		pushed := time.Now()
		if _, _, err := pushVerdicts(&ans, 1); err != nil {
			fail(err)
		}
		select {
		case at := <-popped:
			lat = append(lat, uint32(min(max(at.Sub(pushed).Microseconds(), 0), 1<<32-1)))
		case err := <-popErr:
			fail(err)
		case <-h.stop.Done():
		}
	}
	slices.Sort(lat)
	res := &PhaseResult{Name: name, Round: r, Window: time.Since(start).Seconds(), Ops: int64(len(lat)), Msgs: int64(len(lat)),
		Errors: errs, ErrSample: sample}
	res.P50, res.P99, res.P999 = quantileMs(lat, 0.50), quantileMs(lat, 0.99), quantileMs(lat, 0.999)
	h.logf("    -> push answered → waiting pop answered: p50 %s ms, p99 %s ms over %d samples, errors %d",
		fmtMs(res.P50), fmtMs(res.P99), len(lat), errs)
	h.results = append(h.results, res)
}

// wakePhase configures a fresh queue (prefix + round + run tag) and runs
// the wake phase on it.
func (h *harness) wakePhase(ctx context.Context, name, url, prefix string, r int) error {
	q := prefix + strconv.Itoa(r) + "_" + h.runTag
	if _, err := configureQueue(ctx, url, q, 3600); err != nil {
		return err
	}
	h.wake(name, url, q, r)
	return nil
}
