"""Write traces in other tools' formats (`xmemplan export`): AIPerf's mooncake_trace."""
