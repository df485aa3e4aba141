module github.com/mewkit/fulfiller

go 1.26.0

require (
	github.com/spf13/cobra v1.10.2
	github.com/spf13/pflag v1.0.10
	go.yaml.in/yaml/v3 v3.0.5
)

require github.com/inconshreveable/mousetrap v1.1.0 // indirect
