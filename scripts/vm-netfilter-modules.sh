#!/bin/sh
# Loads the kernel's netfilter modules (nf_tables and its expressions, x_tables matches and
# targets, conntrack, NAT, IPVS) once, before the tests, inside the IPVS VM.
#
# A kernel loads them on first use: an nf_tables transaction naming an expression whose
# module is not loaded is aborted, the module requested, and the transaction replayed. Under
# software emulation each round costs seconds (the first `nft -f` of a small NAT ruleset took
# 20.8 s, the next 0.36 s), so the first nftables transaction of four agents switching mode at
# once took minutes. On a node these modules load in milliseconds, or are loaded already.
d=/lib/modules/$(uname -r)/kernel/net
mods=$(find "$d/netfilter" "$d/ipv4/netfilter" "$d/ipv6/netfilter" -name '*.ko*' 2>/dev/null |
  sed 's|.*/||; s|\.ko.*||' |
  grep -E '^(nf_tables|nf_conntrack|nf_nat|nf_reject|nf_defrag|nf_socket|nft_|xt_|x_tables|ip_tables|ip6_tables|iptable_|ip6table_|ip_vs)' |
  grep -vE '^nf_(conntrack|nat)_(amanda|broadcast|ftp|h323|irc|netbios_ns|pptp|sane|sip|snmp|tftp)$' || true)
start=$(date +%s)
# One call loads them all (a process per module costs a second each under emulation); should
# one fail to load, the others are loaded one by one.
modprobe -a -q $mods 2>/dev/null || for m in $mods; do modprobe -q "$m" 2>/dev/null || true; done
echo "netfilter modules loaded: $(echo "$mods" | wc -w) in $(( $(date +%s) - start )) s"
