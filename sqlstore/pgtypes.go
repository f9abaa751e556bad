package sqlstore

import (
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

type pgtypeUUID = pgtype.UUID

type pgTime = time.Time

func nowMicros() int64 { return time.Now().UnixMicro() }
