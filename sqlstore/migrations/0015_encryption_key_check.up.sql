-- Regina schema, version 15: the key check value of payload encryption.
--
-- One row, written by the first broker that seals a payload (or starts with
-- QUEEN_ENCRYPTION_KEY): HMAC-SHA256 of a fixed label under the key
-- (internal/crypt.Key.CheckValue). A broker started with another key, or
-- without one while this row exists, refuses to start, so that it never
-- stores plaintext into an encrypted queue nor serves ciphertext as data.
-- Deleting the row (when no sealed payload is left) lets another key start.
CREATE TABLE queen.encryption_key_check (
    one         boolean     PRIMARY KEY DEFAULT true CHECK (one),
    check_value bytea       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
