-- Regina schema, version 27: refused acks counted apart from failed ones.
--
-- An ack naming a lease that was already released (an earlier failed or
-- retried ack of its batch gave the batch back, or a seek dropped it) is
-- refused: the message is delivered again, nothing is lost, and the
-- consumer did nothing wrong. ack_failed keeps the acks that could not be
-- applied (unknown message, unresolvable id, an expired or replaced lease);
-- ack_refused counts the refused ones (GET /api/v1/status and the analytics
-- views answer it as ackRefused).
ALTER TABLE queen.stats_minutes ADD COLUMN ack_refused bigint NOT NULL DEFAULT 0;
