package sqlstore

import "github.com/jackc/pgx/v5/pgtype"

type pgtypeUUID = pgtype.UUID
