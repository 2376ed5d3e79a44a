#!/usr/bin/env python3
# A cluster for one node agent: node-a, the kube-dns Service 10.96.0.10 with one endpoint, and
# N ClusterIP Services (port 80/TCP) in 100 namespaces, each with one EndpointSlice of one
# ready endpoint on another node.
# Usage: gen_cluster.py N CLUSTER_YAML
import sys
N = int(sys.argv[1])
out = ["apiVersion: v1\nkind: Node\nmetadata: {name: node-a}\nspec: {podCIDRs: [10.244.0.0/24]}\n"
       "status: {addresses: [{type: InternalIP, address: 10.250.0.1}]}\n",
       "apiVersion: v1\nkind: Service\nmetadata: {name: kube-dns, namespace: kube-system}\n"
       "spec: {clusterIP: 10.96.0.10, ports: [{name: dns, port: 53, protocol: UDP}, {name: dns-tcp, port: 53, protocol: TCP}]}\n",
       "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: kube-dns-1, namespace: kube-system, "
       "labels: {kubernetes.io/service-name: kube-dns}}\naddressType: IPv4\n"
       "ports: [{name: dns, port: 53, protocol: UDP}, {name: dns-tcp, port: 53, protocol: TCP}]\n"
       "endpoints: [{addresses: [10.244.1.53], conditions: {ready: true}, nodeName: node-b}]\n"]
for i in range(N):
    ns, ip = f"ns-{i % 100}", f"10.{96 + (i >> 16)}.{(i >> 8) & 255}.{i & 255}"
    if ip == "10.96.0.10":
        ip = "10.127.255.254"
    ep = f"10.{200 + (i >> 16)}.{(i >> 8) & 255}.{i & 255}"
    out.append(f"apiVersion: v1\nkind: Service\nmetadata: {{name: svc-{i}, namespace: {ns}}}\n"
               f"spec: {{clusterIP: {ip}, ports: [{{name: http, port: 80, protocol: TCP}}]}}\n")
    out.append(f"apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: svc-{i}-1, namespace: {ns}, "
               f"labels: {{kubernetes.io/service-name: svc-{i}}}}}\naddressType: IPv4\n"
               f"ports: [{{name: http, port: 80, protocol: TCP}}]\n"
               f"endpoints: [{{addresses: [{ep}], conditions: {{ready: true}}, nodeName: node-b}}]\n")
open(sys.argv[2], "w").write("---\n".join(out))
