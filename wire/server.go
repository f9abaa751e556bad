package wire

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/segmentio/encoding/json"
	"github.com/valyala/fasthttp"
	"golang.org/x/sync/semaphore"

	"github.com/regina-mq/regina/internal/auth"
	"github.com/regina-mq/regina/metrics"
	"github.com/regina-mq/regina/reginatype"
)

// Version is reported by /health.
const Version = "0.1.0"

// MaxHeaderBytes bounds a request's line and headers together (fasthttp's
// read buffer, allocated per connection): room for a bearer token of
// auth.MaxTokenBytes and the usual headers. Larger requests get 431.
const MaxHeaderBytes = 32 << 10

// Config configures the HTTP server.
type Config struct {
	// MaxBodyBytes bounds a request body (default 64 MiB); larger bodies get
	// 413.
	MaxBodyBytes int
	// MaxBodyBytesInFlight bounds the request body bytes held at once, from
	// the start of their read to the end of their handler (default 4 x
	// MaxBodyBytes; at least MaxBodyBytes). A body that finds no room
	// within ReadTimeout gets a retryable 503.
	MaxBodyBytesInFlight int
	// ReadTimeout bounds reading one request, headers and body (default 60s),
	// so a slow client cannot hold a connection forever.
	ReadTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long (default 120s).
	IdleTimeout time.Duration
	// Logger receives the server's logs.
	Logger zerolog.Logger
	// Instance names this broker where the API reports who recorded
	// something (a trace event's worker_id, the analytics' replicas);
	// default: the host name.
	Instance string
	// Metrics receives the HTTP metrics and is served at /metrics/prometheus;
	// its Snapshot feeds the JSON views (/metrics, /api/v1/status). nil: a
	// private one without a snapshot source.
	Metrics *metrics.Metrics
	// DefaultSubscriptionMode is the subscriptionMode of a pop that names
	// none (DEFAULT_SUBSCRIPTION_MODE); "" means "all". New panics on a
	// value SubscriptionSkipsHistory refuses (check it at start).
	DefaultSubscriptionMode string
	// EncryptionKey tells whether the broker has QUEEN_ENCRYPTION_KEY
	// (configure's encryptionActive, and its warning without one).
	EncryptionKey bool
	// MaxConns bounds the connections served at once (0: no bound); one
	// over it is closed as soon as accepted.
	MaxConns int
	// MaxConnsPerIP bounds the connections served at once from one client
	// address (0: no bound).
	MaxConnsPerIP int
	// Auth checks every routed request against its route's Role; nil (or
	// an Authenticator with auth off) serves every route to anyone.
	Auth *auth.Authenticator
}

// Server serves the Queen HTTP API.
type Server struct {
	b       Backend
	cfg     Config
	log     zerolog.Logger
	srv     *fasthttp.Server
	started time.Time
	metrics *metrics.Metrics
	// instance is Config.Instance.
	instance string
	// ready is set once b is there (New, or Start after NewStarting);
	// handlers read b only after seeing it.
	ready atomic.Bool
	// startErr is the last reason the backend is not there yet (SetStartError).
	startErr atomic.Pointer[string]
	// stats counts what this broker serves (see stats.go).
	stats *statsAcc
	// bodies is the budget of body bytes in flight (see readBody).
	bodies *semaphore.Weighted
}

// New returns a server calling b. It panics when a field of b is nil (a
// wiring bug, caught at start).
func New(b Backend, cfg Config) *Server {
	s := NewStarting(cfg)
	s.Start(b)
	return s
}

// NewStarting returns a server without its backend, for a broker that
// listens before its database is connected: until Start, GET /health and
// GET /ready answer 503, GET /health/live and the Prometheus scrape are
// served, and every other route answers a retryable 503 with Retry-After
// (nothing is done).
func NewStarting(cfg Config) *Server {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 64 << 20
	}
	if cfg.MaxBodyBytesInFlight <= 0 {
		cfg.MaxBodyBytesInFlight = 4 * cfg.MaxBodyBytes
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = 60 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 120 * time.Second
	}
	if cfg.Instance == "" {
		cfg.Instance, _ = os.Hostname()
	}
	if _, err := SubscriptionSkipsHistory(cfg.DefaultSubscriptionMode); err != nil {
		panic("wire.New: DefaultSubscriptionMode: " + err.Error())
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New(metrics.Config{})
	}
	s := &Server{cfg: cfg, log: cfg.Logger.With().Str("component", "wire").Logger(), started: time.Now(),
		metrics: cfg.Metrics, instance: cfg.Instance, stats: newStatsAcc(), bodies: newBodyBudget(cfg)}
	s.srv = &fasthttp.Server{
		Handler: s.instrumented,
		Name:    "regina",
		// Handle reads the body once the request is authorized (readBody).
		// fasthttp calls it once the first byte of the body is there (its
		// prefetch is min(MaxRequestBodySize, 8 KiB)), and never pre-parses
		// a multipart form.
		MaxRequestBodySize:            1,
		StreamRequestBody:             true,
		DisablePreParseMultipartForm:  true,
		ReadBufferSize:                MaxHeaderBytes,
		ReadTimeout:                   cfg.ReadTimeout,
		IdleTimeout:                   cfg.IdleTimeout,
		DisableHeaderNamesNormalizing: false,
		NoDefaultServerHeader:         false,
		ErrorHandler:                  s.handleReadError,
		Logger:                        fasthttpLogger{s.log},
		ConnState:                     s.connState,
	}
	return s
}

// Start plugs the backend into a server from NewStarting: from then on it
// serves every route. It panics when a field of b is nil (a wiring bug).
// Call it once.
func (s *Server) Start(b Backend) {
	b.mustBeComplete()
	s.b = b
	s.ready.Store(true) // publishes b to the handlers
}

// SetStartError records why the backend is not there yet (the last failed
// attempt to connect), for GET /ready while starting.
func (s *Server) SetStartError(err error) {
	msg := err.Error()
	s.startErr.Store(&msg)
}

// Serve accepts connections on ln until Shutdown. A failed accept (too many
// open files) is retried after a backoff, never the end of serving;
// connections over Config.MaxConns or Config.MaxConnsPerIP are closed as
// soon as accepted.
func (s *Server) Serve(ln net.Listener) error {
	return s.srv.Serve(newListener(ln, s.cfg.MaxConns, s.cfg.MaxConnsPerIP, s.log, s.metrics))
}

// Shutdown stops accepting connections and waits for open requests to finish
// (or ctx to end).
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.ShutdownWithContext(ctx) }

type fasthttpLogger struct{ l zerolog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) { f.l.Debug().Msgf(format, args...) }

// handleReadError answers requests that failed before routing.
func (s *Server) handleReadError(ctx *fasthttp.RequestCtx, err error) {
	var tooLarge bool
	if errors.Is(err, fasthttp.ErrBodyTooLarge) || strings.Contains(err.Error(), "body size exceeds") {
		tooLarge = true
	}
	if tooLarge {
		writeError(ctx, fasthttp.StatusRequestEntityTooLarge, "Request body exceeds the limit of "+itoa(s.cfg.MaxBodyBytes)+" bytes")
		return
	}
	if _, ok := errors.AsType[*fasthttp.ErrSmallBuffer](err); ok {
		writeError(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge, "Request headers exceed the limit of "+itoa(MaxHeaderBytes)+" bytes")
		return
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		writeError(ctx, fasthttp.StatusRequestTimeout, "Request timeout")
		return
	}
	writeError(ctx, fasthttp.StatusBadRequest, "Bad request: "+err.Error())
}

func setCORS(ctx *fasthttp.RequestCtx) {
	h := &ctx.Response.Header
	h.Set("Access-Control-Allow-Origin", "*")
	h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE, OPTIONS")
	h.Set("Access-Control-Allow-Headers", "Content-Type, Authorization")
}

// Handle routes one request through the route table: OPTIONS on any path
// is the CORS preflight (204); a path no route matches is 404; a path whose
// routes all want another method is 405 with Allow; a matched route runs
// only when the request passes its Role (authorize) and its path and query
// parameters are usable text (checkParams), and only then is its body read
// (readBody): a refused request's body is never read.
func (s *Server) Handle(ctx *fasthttp.RequestCtx) {
	setCORS(ctx)
	if ctx.IsOptions() {
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		return
	}
	r, params, candidates := route(string(ctx.Method()), requestPath(ctx))
	switch {
	case r != nil:
		if !s.ready.Load() && !servesWhileStarting(r) {
			answerStarting(ctx)
			return
		}
		if !s.authorize(ctx, r) || !checkParams(ctx, r, params) {
			return
		}
		release, ok := s.readBody(ctx)
		if !ok {
			return
		}
		defer release()
		r.handle(s, ctx, params)
	case len(candidates) > 0:
		allow := make([]string, 0, len(candidates)+1)
		for _, c := range candidates {
			if !slices.Contains(allow, c.Method) {
				allow = append(allow, c.Method)
			}
		}
		methodNotAllowed(ctx, strings.Join(allow, ", "))
	default:
		notFound(ctx)
	}
}

// requestPath is the request's raw path, without the query.
func requestPath(ctx *fasthttp.RequestCtx) string {
	path := string(ctx.URI().PathOriginal())
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	return path
}

func notFound(ctx *fasthttp.RequestCtx) { writeError(ctx, fasthttp.StatusNotFound, "Not Found") }

func methodNotAllowed(ctx *fasthttp.RequestCtx, allow string) {
	ctx.Response.Header.Set("Allow", allow+", OPTIONS")
	writeError(ctx, fasthttp.StatusMethodNotAllowed, "Method Not Allowed")
}

// writeJSON writes v as the JSON body with the status.
func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(ctx, fasthttp.StatusInternalServerError, "encode response: "+err.Error())
		return
	}
	writeRaw(ctx, status, b)
}

func writeRaw(ctx *fasthttp.RequestCtx, status int, b []byte) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// writeError writes {"error": msg}.
func writeError(ctx *fasthttp.RequestCtx, status int, msg string) {
	b := make([]byte, 0, len(msg)+16)
	b = append(b, `{"error":`...)
	b = appendString(b, msg)
	b = append(b, '}')
	writeRaw(ctx, status, b)
}

// errorStatus maps an error from the broker core to an HTTP status and the
// message for the client. It is the one place where core errors become
// HTTP. Every such error leaves a retry safe (the answer says
// "retryable": true): nothing was written, or the outcome is unknown and a
// push retried with the same transactionId is deduplicated.
func errorStatus(err error) (status int, msg string) {
	switch {
	case errors.Is(err, reginatype.ErrMailboxFull):
		return fasthttp.StatusServiceUnavailable, "Partition mailbox is full; retry with backoff"
	case errors.Is(err, reginatype.ErrShuttingDown):
		return fasthttp.StatusServiceUnavailable, "Broker is shutting down; retry on another broker or later"
	case errors.Is(err, reginatype.ErrOutcomeUnknown), errors.Is(err, context.Canceled),
		errors.Is(err, context.DeadlineExceeded):
		// A context that ended mid-statement (the broker shutting down under
		// a request, a store timeout) leaves the outcome unknown; it is never
		// the client's input, so never a 500.
		return fasthttp.StatusServiceUnavailable, "Outcome unknown: the request may or may not have taken effect; " +
			"retrying is safe (a push retried with the same transactionId is deduplicated)"
	case errors.Is(err, reginatype.ErrNoEncryptionKey):
		return fasthttp.StatusServiceUnavailable, "The queue's payloads are encrypted and this broker has no " +
			"QUEEN_ENCRYPTION_KEY (or not the key they were sealed with); nothing was written or leased; " +
			"a broker with the key can serve it"
	case errors.Is(err, reginatype.ErrUnavailable):
		return fasthttp.StatusServiceUnavailable, "Database unavailable; nothing was written"
	case reginatype.IsRetryable(err):
		return fasthttp.StatusServiceUnavailable, "Database error; nothing was written; retry: " + err.Error()
	default:
		return fasthttp.StatusInternalServerError, "Database error; nothing was changed, but a push may be retried " +
			"safely with the same transactionId: " + err.Error()
	}
}

// writeCoreError answers with the mapping of errorStatus; a value the
// database refused as invalid (refusedInput) is the client's 400, not
// retryable, without the database's words.
func (s *Server) writeCoreError(ctx *fasthttp.RequestCtx, err error) {
	if code, ok := refusedInput(err); ok {
		s.log.Warn().Err(err).Msg("the database refused a value the wire let through")
		writeError(ctx, fasthttp.StatusBadRequest, "Invalid input: the database refused a value of this request (SQLSTATE "+
			code+"); nothing was changed")
		return
	}
	status, msg := errorStatus(err)
	if status >= 500 {
		ctx.Response.Header.Set("Retry-After", "1")
		s.countDBError()
	}
	b := make([]byte, 0, len(msg)+48)
	b = append(b, `{"error":`...)
	b = appendString(b, msg)
	b = append(b, `,"retryable":true}`...)
	writeRaw(ctx, status, b)
}

// refusedInput reports whether err is PostgreSQL refusing a value: a data
// exception (SQLSTATE class 22: bad encoding, NUL, out of range) or a
// program limit (class 54: an index key too long). The wire checks text
// before it gets there (textcheck.go); this is the net under those checks.
func refusedInput(err error) (string, bool) {
	var pg interface{ SQLState() string }
	if !errors.As(err, &pg) {
		return "", false
	}
	code := pg.SQLState()
	return code, strings.HasPrefix(code, "22") || strings.HasPrefix(code, "54")
}

func itoa(n int) string { return string(appendInt(nil, int64(n))) }
