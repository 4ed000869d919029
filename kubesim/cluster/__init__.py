"""The cluster half of kubesim: nodes, scheduler, controllers, kubelet, proxies, faults and the assembly."""
