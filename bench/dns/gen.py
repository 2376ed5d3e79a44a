#!/usr/bin/env python3
# Synthetic cluster.local zone (for Knot) and query file: 100 namespaces x 100 ClusterIP
# services (10,000), each with an A record and an SRV record for named port "http"; plus
# 1,000 headless services (10 per namespace) with 5 ready endpoints each: 5 A records at the
# service name, one A per endpoint hostname (dashed IP), and 5 SRV records (_http._tcp)
# targeting the endpoint hostnames (Kubernetes DNS spec 2.4.x).
# Usage: gen.py ZONE_FILE QUERY_FILE   (fixed seed: the same files every time)
import random, sys
random.seed(42)
Z = "cluster.local."
NS, SVC_PER_NS, HL_PER_NS, EP = 100, 100, 10, 5
out = []
out.append(f"$ORIGIN {Z}\n$TTL 5\n")
out.append(f"@ 5 IN SOA ns.dns.{Z} hostmaster.{Z} 1 7200 1800 86400 5\n")
out.append(f"@ 5 IN NS ns.dns.{Z}\nns.dns 5 IN A 10.96.0.10\n")
out.append('dns-version 28800 IN TXT "1.1.0"\n')
svc_names, hl_names = [], []
n = 0
for m in range(NS):
    ns = f"ns-{m}"
    for s in range(SVC_PER_NS):
        name = f"svc-{s}.{ns}.svc"
        out.append(f"{name} IN A 10.96.{n >> 8}.{n & 255}\n")
        out.append(f"_http._tcp.{name} IN SRV 0 100 80 {name}.{Z}\n")
        svc_names.append(name)
        n += 1
k = 0
for m in range(NS):
    ns = f"ns-{m}"
    for h in range(HL_PER_NS):
        name = f"hl-{h}.{ns}.svc"
        for e in range(EP):
            b = (k >> 8) & 255; c = k & 255
            ip = f"10.244.{b}.{c}"
            host = ip.replace(".", "-")
            out.append(f"{name} IN A {ip}\n")
            out.append(f"{host}.{name} IN A {ip}\n")
            out.append(f"_http._tcp.{name} IN SRV 0 20 8080 {host}.{name}.{Z}\n")
            k += 1
        hl_names.append(name)
open(sys.argv[1], "w").writelines(out)

# Query mix: 70% ClusterIP A, 10% SRV, 10% NXDOMAIN (in-zone), 10% headless A
q = []
N = 200000
for i in range(N):
    r = random.random()
    if r < 0.70:
        q.append(f"{random.choice(svc_names)}.{Z} A\n")
    elif r < 0.80:
        q.append(f"_http._tcp.{random.choice(svc_names)}.{Z} SRV\n")
    elif r < 0.90:
        # NXDOMAINs as produced by ndots:5 search-path expansion from a pod in ns-X
        x = random.randrange(NS); t = random.random()
        if t < 0.4:   # "svc-N.ns-M" tried as svc-N.ns-M.ns-X.svc.cluster.local
            q.append(f"{random.choice(svc_names)[:-4]}.ns-{x}.svc.{Z} A\n")
        elif t < 0.7: # external name tried with search suffixes
            q.append(f"www.example{random.randrange(1000)}.com.ns-{x}.svc.{Z} A\n")
        else:         # non-existent service
            q.append(f"nosuch-{random.randrange(100000)}.ns-{x}.svc.{Z} A\n")
    else:
        q.append(f"{random.choice(hl_names)}.{Z} A\n")
open(sys.argv[2], "w").writelines(q)
