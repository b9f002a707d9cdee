#!/bin/sh
# OpenMPI's remote-shell agent for tests/e2e/test_expert_parallel_hosts.py, in place of ssh:
# mpirun runs `netns_rsh.sh HOST COMMAND...` to start its daemon on HOST; here each "host" is a
# network namespace on this machine, so the command runs in HOST's namespace. The map comes
# from the environment mpirun passes on: NETNS_RSH_HOSTS="ADDRESS=NAMESPACE ADDRESS=NAMESPACE".
host=$1
shift
for pair in $NETNS_RSH_HOSTS; do
  if [ "${pair%%=*}" = "$host" ]; then
    # COMMAND arrives as words meant for a remote shell (ssh joins them too).
    exec ip netns exec "${pair#*=}" sh -c "$*"
  fi
done
echo "netns_rsh.sh: no namespace for host $host in NETNS_RSH_HOSTS='$NETNS_RSH_HOSTS'" >&2
exit 255
