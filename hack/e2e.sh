#!/usr/bin/env bash
# Runs the e2e suite (test/e2e) as E2E_SHARDS test processes at once, each
# with a control plane, fleet and server of its own (the suite's TestMain
# starts them), so that the suite's waits overlap: most of an e2e test's
# time is spent waiting on the HPA's windows and the scrape interval, not on
# the CPU.
#
#   E2E_SHARDS=5 E2E_TIMEOUT=45m E2E_RUN=regexp hack/e2e.sh
#
# The test binary is built once. Tests are dealt to the shards longest
# first (by the durations below, measured on a 2-core machine; a test not
# listed counts as a minute), each shard taking the next test while it has
# the least work. A shard's output goes to bin/e2e-logs/shard-N.log; a
# passing shard prints its tests' results and durations, a failing one its
# whole log. Every test the binary lists runs in exactly one shard.
set -euo pipefail
cd "$(dirname "$0")/.."

shards="${E2E_SHARDS:-5}"
timeout="${E2E_TIMEOUT:-45m}"
run="${E2E_RUN:-.}"
bin_dir="${GMS_BIN_DIR:-$PWD/bin}"
logs="${bin_dir}/e2e-logs"

# Seconds each test took in the cold CI run of docs/testing.md.
durations="
TestRealNode 290
TestChurn 212
TestLWSGroupAutoscaling 151
TestEndpointTenants 132
TestInferenceAutoscaling 100
TestScaleToZero 80
TestCertificateRotation 82
TestHighAvailability 78
TestLWSUnreadyWorkers 69
TestLoad 67
TestReadFlood 80
TestUkpdFaults 57
TestLifecycle 51
TestUkpdStandby 48
TestMigrationFromMetricsServer 44
TestUkpdPods 43
TestUkpdRelays 45
TestNodeFaults 39
TestMatchesMetricsServer 32
TestKwokResourceMetrics 22
TestHPAScales 29
TestHelmChart 19
TestClusterSmoke 18
TestHighAvailabilityRollout 18
TestKubectlTop 13
TestAuthorization 10
TestCredentialsNotLeaked 9
TestLeaderWorkerSetController 8
TestRequestsRefused 6
TestUkpdPages 6
TestHostileRequests 3
TestCertControllerLeaseLost 5
TestManifestsHardened 3
TestAggregatedAPIService 2
TestControlPlaneRelease 1
TestMetricsServerFlagList 1
TestKubeletCredentialReadOnly 0
"

mkdir -p "${logs}"
rm -f "${logs}"/shard-*.log
test_bin="${bin_dir}/e2e.test"
go test -c -tags e2e -o "${test_bin}" ./test/e2e

mapfile -t tests < <(cd test/e2e && "${test_bin}" -test.list "${run}" | grep -E '^(Test|Example)')
if [ "${#tests[@]}" -eq 0 ]; then
	echo "e2e: no test matches ${run}" >&2
	exit 1
fi

# Tests that must not run at the same time as each other go to one shard,
# one after another: TestRealNode's containers run at the CPU weight of a
# machine of their own (test/cluster, podsCPUShares) and take a core while
# the LWS guide's load runs, and TestReadFlood bounds the HPA's read latency
# on this machine, which it measures without that core.
together="TestRealNode TestReadFlood"

# units prints "seconds name" for each test, but one line for the tests of
# together that the run has, named "A|B" (a -test.run alternative).
units() {
	local t secs group="" group_secs=0
	for t in "${tests[@]}"; do
		secs="$(awk -v t="$t" '$1 == t {print $2}' <<<"${durations}")"
		secs="${secs:-60}"
		if [[ " ${together} " == *" ${t} "* ]]; then
			group="${group:+${group}|}${t}"
			group_secs=$((group_secs + secs))
		else
			echo "${secs} ${t}"
		fi
	done
	if [[ -n "${group}" ]]; then
		echo "${group_secs} ${group}"
	fi
}

# Deal the tests, longest first, to the shard with the least work.
declare -a load names
for ((i = 0; i < shards; i++)); do
	load[i]=0
	names[i]=""
done
while read -r secs name; do
	min=0
	for ((i = 1; i < shards; i++)); do
		if ((load[i] < load[min])); then min=$i; fi
	done
	load[min]=$((load[min] + secs))
	names[min]="${names[min]:+${names[min]}|}${name}"
done < <(units | sort -k1,1nr -k2)

start=${SECONDS}
declare -a pids
for ((i = 0; i < shards; i++)); do
	[ -n "${names[i]}" ] || continue
	echo "e2e: shard ${i} (about ${load[i]} s): ${names[i]//|/ }"
	(cd test/e2e && exec "${test_bin}" -test.run "^(${names[i]})\$" -test.timeout "${timeout}" -test.v -test.count=1) \
		>"${logs}/shard-${i}.log" 2>&1 &
	pids[i]=$!
done

status=0
for ((i = 0; i < shards; i++)); do
	[ -n "${pids[i]:-}" ] || continue
	if wait "${pids[i]}"; then
		echo "== e2e shard ${i}: ok"
		grep -E '^(--- |ok|PASS|e2e setup)' "${logs}/shard-${i}.log" || true
	else
		status=1
		echo "== e2e shard ${i}: FAIL (log ${logs}/shard-${i}.log)"
		cat "${logs}/shard-${i}.log"
	fi
done
echo "e2e: ${#tests[@]} tests in ${shards} shards, $((SECONDS - start)) s"
exit "${status}"
