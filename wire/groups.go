package wire

import (
	"math"
	"sort"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/regina-mq/regina/reginatype"
)

// The consumer-group views: the list (one row per group and queue), the
// lagging partitions, and one group's cursors. Every figure is computed from
// the cursors at the time of the call (see docs/api.md, Consumer groups).

// LaggingStateSeconds is the time lag above which a group's state is
// "Lagging".
const LaggingStateSeconds = 300

// Consumer group states of the list.
const (
	GroupLagging = "Lagging"
	GroupStable  = "Stable"
	GroupDead    = "Dead"
)

type groupListRow struct {
	Name      string   `json:"name"`
	Topics    []string `json:"topics"`
	QueueName string   `json:"queueName"`
	// Members counts the group's cursors on the queue (partitions it read).
	Members int `json:"members"`
	// PartitionsWithLag counts the partitions with messages after the
	// cursor.
	PartitionsWithLag int `json:"partitionsWithLag"`
	// TotalLag is the messages after the group's cursors, summed.
	TotalLag int64 `json:"totalLag"`
	// MaxTimeLag is the age in seconds of the oldest message the group has
	// not consumed on any partition of the queue (0 when caught up).
	MaxTimeLag            int64   `json:"maxTimeLag"`
	State                 string  `json:"state"`
	SubscriptionMode      *string `json:"subscriptionMode"`
	SubscriptionTimestamp *string `json:"subscriptionTimestamp"`
	SubscriptionCreatedAt *string `json:"subscriptionCreatedAt"`
}

// subscriptionMode labels a recorded start point: "new" when it is the time
// the group was first seen (a pop with subscriptionMode=new, recorded in the
// same statement), "timestamp" otherwise (subscriptionFrom, or moved by
// POST .../subscription); nil when none is recorded.
func subscriptionMode(c *reginatype.GroupCursor) *string {
	switch {
	case c.SubscriptionFrom == nil:
		return nil
	case c.SubscriptionAt != nil && c.SubscriptionFrom.Equal(*c.SubscriptionAt):
		return new("new")
	default:
		return new("timestamp")
	}
}

// groupList sums cursors (sorted by group, then queue) into one row per
// (group, queue).
func groupList(cs []reginatype.GroupCursor, now time.Time) []groupListRow {
	out := []groupListRow{}
	var consumed bool
	for i := range cs {
		c := &cs[i]
		if n := len(out); n == 0 || out[n-1].Name != c.Group || out[n-1].QueueName != c.Queue {
			if n > 0 {
				out[n-1].State = groupState(&out[n-1], consumed)
			}
			consumed = false
			var subTS, subAt *string
			if c.SubscriptionFrom != nil {
				subTS, subAt = timePtr(c.SubscriptionFrom), timePtr(c.SubscriptionAt)
			}
			out = append(out, groupListRow{Name: c.Group, Topics: []string{c.Queue}, QueueName: c.Queue,
				SubscriptionMode: subscriptionMode(c), SubscriptionTimestamp: subTS, SubscriptionCreatedAt: subAt})
		}
		r := &out[len(out)-1]
		r.Members++
		if lag := c.Lag(); lag > 0 {
			r.PartitionsWithLag++
			r.TotalLag += lag
		}
		r.MaxTimeLag = max(r.MaxTimeLag, int64(c.LagSeconds(now)))
		// A cursor some pop, ack or seek changed has delivered (or skipped)
		// messages; one only created has not.
		consumed = consumed || c.UpdatedAt.After(c.CreatedAt)
	}
	if n := len(out); n > 0 {
		out[n-1].State = groupState(&out[n-1], consumed)
	}
	return out
}

// groupState is Lagging past LaggingStateSeconds of time lag, else Stable
// when a cursor of the group on the queue has been used, else Dead.
func groupState(r *groupListRow, consumed bool) string {
	switch {
	case r.MaxTimeLag > LaggingStateSeconds:
		return GroupLagging
	case consumed:
		return GroupStable
	default:
		return GroupDead
	}
}

// handleConsumerGroups serves GET /api/v1/consumer-groups: a bare array,
// one row per (group, queue) with a cursor, by group then queue, queue mode
// included.
func (s *Server) handleConsumerGroups(ctx *fasthttp.RequestCtx) {
	cs, now, err := s.b.Groups.GroupCursors(ctx, "")
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, groupList(cs, now))
}

type laggingRow struct {
	ConsumerGroup string `json:"consumer_group"`
	QueueName     string `json:"queue_name"`
	PartitionName string `json:"partition_name"`
	PartitionID   string `json:"partition_id"`
	// WorkerID is the group's live lease on the partition, null when none.
	WorkerID           *string `json:"worker_id"`
	OffsetLag          int64   `json:"offset_lag"`
	TimeLagSeconds     int64   `json:"time_lag_seconds"`
	LagHours           float64 `json:"lag_hours"`
	OldestUnconsumedAt *string `json:"oldest_unconsumed_at"`
	// LastConsumedAt is when a pop, an ack or a seek last changed the
	// cursor.
	LastConsumedAt string `json:"last_consumed_at"`
}

// handleLaggingGroups serves GET /api/v1/consumer-groups/lagging
// (minLagSeconds, default 3600): every (group, partition) whose oldest
// unconsumed message is older than minLagSeconds, largest lag first.
func (s *Server) handleLaggingGroups(ctx *fasthttp.RequestCtx) {
	minLag := int64(3600)
	if v := ctx.QueryArgs().Peek("minLagSeconds"); len(v) > 0 {
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil || n < 0 {
			writeError(ctx, fasthttp.StatusBadRequest, "minLagSeconds must be a whole number of seconds")
			return
		}
		minLag = n
	}
	cs, now, err := s.b.Groups.GroupCursors(ctx, "")
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	out := []laggingRow{}
	for i := range cs {
		c := &cs[i]
		lag := c.LagSeconds(now)
		if c.OldestPendingAt == nil || lag <= float64(minLag) {
			continue
		}
		r := laggingRow{ConsumerGroup: c.Group, QueueName: c.Queue, PartitionName: c.Partition,
			PartitionID: c.PartitionID.String(), OffsetLag: c.Lag(), TimeLagSeconds: int64(lag),
			LagHours: math.Round(lag/36) / 100, OldestUnconsumedAt: timePtr(c.OldestPendingAt),
			LastConsumedAt: timeMillis(c.UpdatedAt)}
		if c.LeaseID != nil {
			r.WorkerID = new(c.LeaseID.String())
		}
		out = append(out, r)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].TimeLagSeconds > out[j].TimeLagSeconds })
	writeJSON(ctx, fasthttp.StatusOK, out)
}

type groupPartitionView struct {
	Partition   string `json:"partition"`
	PartitionID string `json:"partitionId"`
	// WorkerID is the live lease, null when none.
	WorkerID       *string `json:"workerId"`
	LastConsumedAt string  `json:"lastConsumedAt"`
	// TotalConsumed is the cursor: offsets below it are consumed (or were
	// skipped by the group's start point or a seek).
	TotalConsumed  int64 `json:"totalConsumed"`
	OffsetLag      int64 `json:"offsetLag"`
	TimeLagSeconds int64 `json:"timeLagSeconds"`
	LeaseActive    bool  `json:"leaseActive"`
}

// handleConsumerGroup serves GET /api/v1/consumer-groups/:group: an object
// keyed by queue name, each with the group's cursors on its partitions
// ({} for an unknown group).
func (s *Server) handleConsumerGroup(ctx *fasthttp.RequestCtx, group string) {
	cs, now, err := s.b.Groups.GroupCursors(ctx, group)
	if err != nil {
		s.writeCoreError(ctx, err)
		return
	}
	type queueView struct {
		Partitions []groupPartitionView `json:"partitions"`
	}
	out := map[string]*queueView{}
	for i := range cs {
		c := &cs[i]
		q := out[c.Queue]
		if q == nil {
			q = &queueView{Partitions: []groupPartitionView{}}
			out[c.Queue] = q
		}
		v := groupPartitionView{Partition: c.Partition, PartitionID: c.PartitionID.String(),
			LastConsumedAt: timeMillis(c.UpdatedAt), TotalConsumed: c.Cursor, OffsetLag: c.Lag(),
			TimeLagSeconds: int64(c.LagSeconds(now)), LeaseActive: c.LeaseID != nil}
		if c.LeaseID != nil {
			v.WorkerID = new(c.LeaseID.String())
		}
		q.Partitions = append(q.Partitions, v)
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
}
