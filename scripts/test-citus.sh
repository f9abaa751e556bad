#!/usr/bin/env bash
# make test/citus: the tests that matter on a real Citus cluster.
#
# Starts a throw-away local cluster (a coordinator and two workers, from
# CITUS_TOOL, default ../shared/tools/citus/start-local-citus.sh), runs the
# Citus tests of sqlstore (a single-partition push is one delegated call on
# one worker, checked with citus.log_remote_commands; no 2PC per packed
# push; any-partition pops served from the cache of ready candidates reach
# one worker each; a cross-worker transaction is atomic; the distribution rule on the
# catalog) and the broker's end-to-end tests of push verdicts, pop, ack,
# groups, DLQ, transactions and retention with TEST_DATABASE_URL at the
# coordinator, then stops the cluster. Skips (exit 0) with a message when
# the tool is absent.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="/usr/local/go/bin:$PATH"

tool=${CITUS_TOOL:-}
if [[ -z $tool ]]; then # ../shared beside the clone (or beside its parent, for a worktree)
	for up in .. ../..; do
		tool=$up/shared/tools/citus/start-local-citus.sh
		[[ -x $tool ]] && break
	done
fi
if [[ ! -x $tool ]]; then
	echo "make test/citus: SKIPPED: no Citus cluster tool at $tool (set CITUS_TOOL to start-local-citus.sh; docs/scaling.md)"
	exit 0
fi
port=${CITUS_PORT:-55432}
parent=$(mktemp -d)
chmod 755 "$parent" # the postgres OS user must reach it when run as root
dir=$parent/citus
trap '"$tool" --stop "$dir" >/dev/null 2>&1 || true; rm -rf "$parent"' EXIT
echo "make test/citus: starting a local Citus cluster in $dir (port $port)"
url=$("$tool" --dir "$dir" --port "$port" | sed -n 's/^DATABASE_URL=//p')
[[ -n $url ]] || { echo "make test/citus: the cluster did not start" >&2; exit 1; }
# 4 shards per table: every test schema distributes ~10 tables (and the
# sidecar's time slices), 32 shards each would make each test slow.
sep='?'; [[ $url == *\?* ]] && sep='&'
export TEST_DATABASE_URL="$url${sep}sslmode=disable&citus.shard_count=4"
# A fresh schema per test: the schema pool's reset reads catalog shapes
# Citus does not plan (and recycled distributed schemas would keep shards).
export SQLSTORETEST_POOL=off

# Every test drops its schema when it ends (sqlstoretest), and Citus's
# metadata locks made concurrent drops and distributions deadlock: on this
# throw-away cluster a DROP SCHEMA waits for the lock the broker's Citus step
# takes (sqlstore/citus.go), so they run one at a time.
psql -X -q -v ON_ERROR_STOP=1 "$url" <<'SQL'
SET client_min_messages = warning;
CREATE OR REPLACE FUNCTION public.regina_test_serialize_drops() RETURNS event_trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('regina.citus'));
END $$;
DROP EVENT TRIGGER IF EXISTS regina_test_serialize_drops;
CREATE EVENT TRIGGER regina_test_serialize_drops ON ddl_command_start WHEN TAG IN ('DROP SCHEMA')
    EXECUTE FUNCTION public.regina_test_serialize_drops();
SQL

e2e='TestPopReadsYourWritesAndAckReleases|TestFIFOUnderConcurrentConsumers|TestQueueModeAndNamedGroups'
e2e+='|TestCompetingConsumersNeverShareALiveLease|TestFailedAcksReachTheDLQAtRetryLimit|TestPushMixedNewAndDuplicate'
e2e+='|TestPushAllDuplicatesWritesNothing|TestTransactionConsumeTransformProduce|TestTransactionDuplicateRollsBackEverything'
e2e+='|TestPopNeverEmptyWhileWorkWaits|TestReplayOutOfTheDLQIsNotSwallowedByDedup'
e2e+='|TestLongPoll|TestTwoBrokersConsumeWithoutDoubleDelivery|TestLongPollIsWokenByAPushThroughAnotherBroker|TestNewGroupIsNotToldEmptyWhileWorkWaits'
e2e+='|TestPopMaintenance|TestPushMaintenance|TestDeleteMessage|TestExplainAndLookupComparePayloads|TestLookupReconcilesAndNeverWrites'
e2e+='|TestConcurrentSameTransactionID|TestPayloadCheck(OffAnswersAsBefore|Report|Reject|InATransaction|SwitchedOnAndOff|BadConfigure)'
go test -count=1 -parallel 3 -timeout 15m ./sqlstore/ -run 'TestCitus|TestDistributionRule|TestPushSegmentProbe|TestPushManyMatchesPush|TestRetentionDropsExpiredSidecarChildren|TestRetentionDropsOnlyNarrowChildrenPastTheHorizon'
go test -count=1 -parallel 3 -timeout 15m ./cmd/regina/ -run "^($e2e)\$"
echo "make test/citus: passed on Citus"
