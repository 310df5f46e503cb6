"""Stockade's tools in agent frameworks: every call a framework makes goes through the engine
(policy, sandbox, timeout, audit record, span), and the policy's ``ask`` reaches the framework's
own approval where it has one.

One module per framework; those that plug into a Python framework are an optional extra that
installs it::

    stockade.engine.adapters.openai_agents   pip install 'stockade[openai-agents]'
    stockade.engine.adapters.pydantic_ai     pip install 'stockade[pydantic-ai]'
    stockade.engine.adapters.langchain       pip install 'stockade[langchain]'
    stockade.engine.adapters.claude_code     Claude Code's PreToolUse hook (no extra)

For example::

    from stockade.engine.adapters.langchain import stockade_tools

    tools = stockade_tools(engine)        # LangChain BaseTools, one per active tool

This package imports no framework: each module imports its own when it is imported, and says
which extra to install when the framework is missing.
"""
