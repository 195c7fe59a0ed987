#!/usr/bin/env bash
# Start one Cassandra node as the upstream cassandra image does: addresses from
# CASSANDRA_LISTEN_ADDRESS (auto: this container's address), _BROADCAST_ADDRESS,
# _RPC_ADDRESS (0.0.0.0), _BROADCAST_RPC_ADDRESS, _SEEDS; CASSANDRA_CLUSTER_NAME,
# _NUM_TOKENS, _ENDPOINT_SNITCH, _DC, _RACK; heap from MAX_HEAP_SIZE (1G here when unset;
# HEAP_NEWSIZE is accepted and, with G1 as in Cassandra's own jvm17 options, unused).
set -euo pipefail
if [ "$#" -gt 0 ] && [ "$1" != "cassandra" ]; then
  exec "$@"
fi
ip=$(hostname -i | awk '{print $1}')
listen=${CASSANDRA_LISTEN_ADDRESS:-auto}
[ "$listen" = auto ] && listen=$ip
broadcast=${CASSANDRA_BROADCAST_ADDRESS:-$listen}
[ "$broadcast" = auto ] && broadcast=$ip
rpc=${CASSANDRA_RPC_ADDRESS:-0.0.0.0}
broadcast_rpc=${CASSANDRA_BROADCAST_RPC_ADDRESS:-$broadcast}
[ "$broadcast_rpc" = auto ] && broadcast_rpc=$ip
seeds=${CASSANDRA_SEEDS:-$broadcast}
snitch=${CASSANDRA_ENDPOINT_SNITCH:-SimpleSnitch}
sed -e "s|@cluster_name@|${CASSANDRA_CLUSTER_NAME:-Test Cluster}|" \
    -e "s|@num_tokens@|${CASSANDRA_NUM_TOKENS:-16}|" \
    -e "s|@listen_address@|$listen|" \
    -e "s|@broadcast_address@|$broadcast|" \
    -e "s|@rpc_address@|$rpc|" \
    -e "s|@broadcast_rpc_address@|$broadcast_rpc|" \
    -e "s|@seeds@|$seeds|" \
    -e "s|@endpoint_snitch@|$snitch|" \
    /etc/cassandra/cassandra.yaml.in > /etc/cassandra/cassandra.yaml
if [ -n "${CASSANDRA_DC:-}${CASSANDRA_RACK:-}" ]; then
  printf 'dc=%s\nrack=%s\n' "${CASSANDRA_DC:-dc1}" "${CASSANDRA_RACK:-rack1}" \
    > /etc/cassandra/cassandra-rackdc.properties
fi
heap=${MAX_HEAP_SIZE:-1G}
mapfile -t jvm < <(grep -E '^-' /etc/cassandra/jvm17.options)
jamm=$(ls /opt/cassandra/lib/jamm-*.jar | tail -n 1)
# shellcheck disable=SC2086
exec java "-Xms$heap" "-Xmx$heap" "${jvm[@]}" "-javaagent:$jamm" \
  -Dcassandra.config=file:///etc/cassandra/cassandra.yaml \
  -Dcassandra.storagedir=/var/lib/cassandra \
  -Dcassandra.logdir=/var/log/cassandra \
  -Dlogback.configurationFile=/etc/cassandra/logback.xml \
  -XX:HeapDumpPath=/var/lib/cassandra \
  ${JVM_EXTRA_OPTS:-} \
  -cp '/etc/cassandra:/opt/cassandra/lib/*' org.apache.cassandra.service.CassandraDaemon
