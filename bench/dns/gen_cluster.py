#!/usr/bin/env python3
# The same synthetic cluster as gen.py's zone, as Kubernetes objects for `tideway dns`:
# 100 namespaces x 100 ClusterIP Services (port "http" 80/TCP, ClusterIP 10.96.x.y in the
# same order), 1,000 headless Services (10 per namespace) each with one EndpointSlice of 5
# ready endpoints 10.244.b.c (port "http" 8080/TCP), and the kube-dns Service 10.96.0.10
# that ns.dns.cluster.local stands for. Answers match the zone record for record.
# Usage: gen_cluster.py CLUSTER_YAML
import sys
NS, SVC_PER_NS, HL_PER_NS, EP = 100, 100, 10, 5
out = []
def doc(s):
    out.append("---\n" + s)
doc("apiVersion: v1\nkind: Service\nmetadata: {name: kube-dns, namespace: kube-system}\n"
    "spec: {clusterIP: 10.96.0.10, ports: [{name: dns, port: 53, protocol: UDP}]}\n")
n = 0
for m in range(NS):
    for s in range(SVC_PER_NS):
        doc(f"apiVersion: v1\nkind: Service\nmetadata: {{name: svc-{s}, namespace: ns-{m}}}\n"
            f"spec: {{clusterIP: 10.96.{n >> 8}.{n & 255}, ports: [{{name: http, port: 80, protocol: TCP}}]}}\n")
        n += 1
k = 0
for m in range(NS):
    for h in range(HL_PER_NS):
        doc(f"apiVersion: v1\nkind: Service\nmetadata: {{name: hl-{h}, namespace: ns-{m}}}\n"
            f"spec: {{clusterIP: None, ports: [{{name: http, port: 8080, protocol: TCP}}]}}\n")
        eps = []
        for e in range(EP):
            eps.append(f"- addresses: [10.244.{(k >> 8) & 255}.{k & 255}]\n  conditions: {{ready: true}}\n")
            k += 1
        doc(f"apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n"
            f"metadata: {{name: hl-{h}-x1, namespace: ns-{m}, labels: {{kubernetes.io/service-name: hl-{h}}}}}\n"
            f"addressType: IPv4\nports: [{{name: http, port: 8080, protocol: TCP}}]\nendpoints:\n" + "".join(eps))
open(sys.argv[1], "w").writelines(out)
