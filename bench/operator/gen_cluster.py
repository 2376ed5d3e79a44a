#!/usr/bin/env python3
# A synthetic cluster for the operator's memory at scale, as a file source: NODES Nodes,
# SERVICES Services in 100 namespaces (one in ten of type LoadBalancer, the rest ClusterIP),
# each with one EndpointSlice of 3 ready endpoints on nodes in turn, and one LoadBalancerPool
# large enough for every LoadBalancer Service.
# Usage: gen_cluster.py SERVICES NODES CLUSTER_YAML
import sys
services, nodes, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
out = []
def doc(s):
    out.append("---\n" + s)
for n in range(nodes):
    doc(f"apiVersion: v1\nkind: Node\nmetadata: {{name: node-{n}, labels: {{topology.kubernetes.io/zone: z{n % 3}}}}}\n"
        f"status:\n  addresses: [{{type: InternalIP, address: 172.18.{n >> 8}.{n & 255}}}]\n"
        f"  conditions: [{{type: Ready, status: 'True'}}]\n")
for m in range(100):
    doc(f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: ns-{m}}}\n")
doc("apiVersion: tideway.io/v1alpha1\nkind: LoadBalancerPool\nmetadata: {name: default}\n"
    "spec: {addresses: [172.20.0.0/14]}\n")
k = 0
for i in range(services):
    ns, name = f"ns-{i % 100}", f"svc-{i}"
    lb = i % 10 == 0
    kind = "LoadBalancer" if lb else "ClusterIP"
    ip = f"10.{96 + (i >> 16)}.{(i >> 8) & 255}.{i & 255}"
    doc(f"apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {ns}}}\n"
        f"spec: {{type: {kind}, clusterIP: {ip}, clusterIPs: [{ip}], selector: {{app: {name}}}, "
        f"ports: [{{name: http, port: 80, protocol: TCP{', nodePort: ' + str(30000 + i % 2700) if lb else ''}}}]}}\n")
    eps = []
    for e in range(3):
        eps.append(f"- addresses: [10.{128 + (k >> 16)}.{(k >> 8) & 255}.{k & 255}]\n"
                   f"  nodeName: node-{k % nodes}\n  conditions: {{ready: true}}\n")
        k += 1
    doc(f"apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n"
        f"metadata: {{name: {name}-1, namespace: {ns}, labels: {{kubernetes.io/service-name: {name}}}}}\n"
        f"addressType: IPv4\nports: [{{name: http, port: 8080, protocol: TCP}}]\nendpoints:\n" + "".join(eps))
open(path, "w").writelines(out)
