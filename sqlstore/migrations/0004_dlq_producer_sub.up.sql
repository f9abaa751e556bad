-- Regina schema, version 4: the producer's subject on dead letters.
--
-- With JWT auth on, every pushed message carries its producer's subject (the
-- token's sub) in its segment frame; a dead letter is a copy of the frame's
-- fields, so it keeps the subject too (NULL: pushed without auth), and a
-- replay puts it back on the message.
ALTER TABLE queen.dlq ADD COLUMN producer_sub text;
