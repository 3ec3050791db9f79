module scalebot.test/capicrds

go 1.26.0

require sigs.k8s.io/cluster-api v1.14.2
