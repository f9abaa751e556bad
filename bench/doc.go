// Package bench holds Regina's benchmarks of the hot pieces of the push path
// (frame codec, hashing, in-batch collapse, push JSON decode, and the push
// transaction through pgx at batch sizes 1/10/100/1000), run with
//
//	make bench                    # one iteration each, as CI does
//	make bench ITERATIONS=5s      # real measurements
//
// Every benchmark reports msgs/s. The database benchmarks need a PostgreSQL
// (TEST_DATABASE_URL, which make finds or starts) and use a schema of their
// own, dropped at the end.
package bench
