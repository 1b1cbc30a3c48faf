//! What a `run-command` needs before its session starts: the provider the flags and the
//! command file choose, its settings, the tools, the budgets and the context policy.

use anyhow::{Context, bail};
use reel_engine::{Budget, Budgets, ContextPolicy, ModelSettings, Provider, Toolbox};
use reel_otel::Traces;
use reel_providers::{AnthropicProvider, HttpConfig, OpenAiProvider, Script, ScriptedProvider};

use crate::{
    command_file::{CommandFile, ProviderDefaults},
    run_args::{Invocation, ProviderName, RunCommandArgs},
    same_file::InUse,
    sink_uri::SinkUri,
};

/// What a run needs once the command file is understood.
pub struct Prepared {
    pub prompt: String,
    pub system_prompt: Option<String>,
    pub provider: Box<dyn Provider>,
    pub settings: ModelSettings,
    pub tools: Toolbox,
    /// Files the command reads (command file, script, tool programs), which no output may
    /// overwrite.
    pub reads: Vec<InUse>,
    pub budgets: Budgets,
    pub context_policy: ContextPolicy,
    /// The command's MCP servers, started with the session (see [`crate::tool_servers`]).
    pub mcp_servers: Vec<reel_mcp::McpServerConfig>,
    /// The session's more outputs: the flags' `--sink`s, then the command file's `sinks:`.
    pub sinks: Vec<SinkUri>,
}

/// How the HTTP provider the flags and the command file describe is reached. The API key is
/// read from an environment variable only, and goes nowhere but the request's key header.
/// Refused before any call: a base URL without its scheme, and no key for the provider's own
/// service (a server of your own, named by a base URL, may take none).
fn http_config(
    args: &RunCommandArgs,
    defaults: &ProviderDefaults,
    provider: ProviderName,
    default_base_url: &str,
) -> anyhow::Result<HttpConfig> {
    let key_variable = key_variable(args, defaults, provider);
    let mut config = HttpConfig {
        api_key: std::env::var(&key_variable)
            .ok()
            .filter(|key| !key.is_empty()),
        ..HttpConfig::new(default_base_url)
    };
    if let Some(url) = args.base_url.clone().or_else(|| defaults.base_url.clone()) {
        check_base_url(&url)?;
        config.base_url = url;
    }
    if let Some(ms) = args.timeout_ms.or(defaults.timeout_ms) {
        config.idle_timeout = std::time::Duration::from_millis(ms);
    }
    if config.api_key.is_none() {
        let shown = config.secrets().shown_url(&config.base_url);
        if config.base_url == default_base_url {
            bail!(
                "{key_variable} is not set: {shown} needs an API key. Set it (export {key_variable}=...), name another variable with --api-key-env NAME, or give --base-url for a server that takes none"
            );
        }
        tracing::info!("{key_variable} is not set: calling {shown} without an API key");
    }
    Ok(config)
}

/// A base URL must say how it is reached (`http://` or `https://`).
fn check_base_url(url: &str) -> anyhow::Result<()> {
    let has_scheme = ["http://", "https://"].iter().any(|scheme| {
        url.get(..scheme.len())
            .is_some_and(|start| start.eq_ignore_ascii_case(scheme))
    });
    if !has_scheme {
        bail!(
            "the base URL {url:?} has no http:// or https://: give it whole, e.g. http://127.0.0.1:8080/v1"
        );
    }
    Ok(())
}

/// Extended thinking is Anthropic's, and its API refuses it together with a set temperature,
/// a forced tool call, or a reply limit no larger than the thinking budget: say so before any
/// call is made.
fn check_thinking(
    settings: &ModelSettings,
    provider: ProviderName,
    tool_choice: reel_engine::ToolChoice,
) -> anyhow::Result<()> {
    let Some(budget) = settings.thinking_budget else {
        return Ok(());
    };
    if provider != ProviderName::Anthropic {
        bail!("a thinking budget is for the anthropic provider (extended thinking)");
    }
    if budget < 1024 {
        return Err(anyhow::anyhow!(
            "the thinking budget is {budget} tokens; Anthropic's minimum is 1024"
        ));
    }
    if settings.temperature.is_some() {
        bail!(
            "extended thinking cannot be combined with a temperature (Anthropic's rule): leave one out"
        );
    }
    if tool_choice == reel_engine::ToolChoice::Required {
        bail!("extended thinking cannot be combined with tool_choice: required (Anthropic's rule)");
    }
    let max_tokens = settings.max_tokens.unwrap_or(4096);
    if max_tokens <= budget {
        return Err(anyhow::anyhow!(
            "max_tokens ({max_tokens}) must be larger than the thinking budget ({budget}): it counts the thinking too"
        ));
    }
    Ok(())
}

/// The environment variable that holds the provider's API key.
pub fn key_variable(
    args: &RunCommandArgs,
    defaults: &ProviderDefaults,
    provider: ProviderName,
) -> String {
    let default = match provider {
        ProviderName::Anthropic => "ANTHROPIC_API_KEY",
        _ => "OPENAI_API_KEY",
    };
    args.api_key_env
        .clone()
        .or_else(|| defaults.api_key_env.clone())
        .unwrap_or_else(|| default.into())
}

pub fn prepare(invocation: &Invocation) -> anyhow::Result<Prepared> {
    let command = invocation
        .command
        .as_ref()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let args = &invocation.args;
    let prompt = command
        .render_prompt(&invocation.variables)
        .context("prompt")?;
    let defaults = &command.provider;
    let provider_name = match (args.provider, defaults.name.as_deref()) {
        (Some(name), _) => name,
        (None, None | Some("scripted")) => ProviderName::Scripted,
        (None, Some("openai")) => ProviderName::Openai,
        (None, Some("anthropic")) => ProviderName::Anthropic,
        (None, Some(other)) => {
            return Err(anyhow::anyhow!(
                "the command file asks for provider {other:?}, which this build does not have (available: scripted, openai, anthropic)"
            ));
        }
    };
    let script_path = match (&args.script, &defaults.script) {
        (Some(path), _) => Some(path.clone()),
        (None, Some(path)) => Some(command.resolve(path)),
        (None, None) => None,
    };
    let provider: Box<dyn Provider> = match provider_name {
        ProviderName::Scripted => match &script_path {
            Some(path) => Box::new(ScriptedProvider::new(Script::load(path)?)),
            None => Box::new(ScriptedProvider::echo()),
        },
        ProviderName::Openai => {
            let config = http_config(
                args,
                defaults,
                provider_name,
                OpenAiProvider::DEFAULT_BASE_URL,
            )?;
            Box::new(OpenAiProvider::new(config)?)
        }
        ProviderName::Anthropic => {
            let config = http_config(
                args,
                defaults,
                provider_name,
                AnthropicProvider::DEFAULT_BASE_URL,
            )?;
            Box::new(AnthropicProvider::new(config)?)
        }
    };
    let settings = ModelSettings {
        model: args
            .model
            .clone()
            .or_else(|| defaults.model.clone())
            .unwrap_or_default(),
        temperature: args.temperature.or(defaults.temperature),
        max_tokens: args.max_tokens.or(defaults.max_tokens),
        max_tokens_field: defaults.max_tokens_field,
        thinking_budget: args.thinking_budget.or(defaults.thinking_budget_tokens),
        pricing: defaults.pricing,
        stop: defaults.stop.clone(),
        tool_call_prefill: defaults.tool_call_prefill.clone(),
    };
    if provider_name != ProviderName::Scripted && settings.model.trim().is_empty() {
        bail!(
            "the {} provider needs a model: give --model NAME, or model: under the command file's provider",
            match provider_name {
                ProviderName::Anthropic => "anthropic",
                _ => "openai",
            }
        );
    }
    check_thinking(&settings, provider_name, command.tool_choice)?;
    // Tools never see the API key, whichever provider runs.
    let key = key_variable(args, defaults, provider_name);
    let tools = crate::toolbox::build(command, args.max_iterations, &key)?;
    let mut reads = vec![InUse::new(&args.command_file, "the command file")];
    reads.extend(script_path.map(|path| InUse::new(path, "the script")));
    reads.extend(
        crate::toolbox::programs(command)
            .into_iter()
            .map(|(name, program)| InUse::new(program, format!("tool {name}'s program"))),
    );
    let settings_pricing = settings.pricing.is_some();
    let mut context_policy = command.context.clone();
    if let Some(window) = args.context_window {
        context_policy.window_tokens = Some(window);
    }
    // The variables fill the system prompt too: a served session's prompts come from its
    // submits, so its variables' values reach the model there.
    let system_prompt = command
        .system_prompt
        .as_deref()
        .map(|text| crate::template::render(text, &invocation.variables))
        .transpose()
        .context("system_prompt")?;
    for server in &command.mcp_servers {
        server
            .check()
            .map_err(|e| anyhow::anyhow!("mcp_servers: {e}"))?;
    }
    Ok(Prepared {
        prompt,
        system_prompt,
        provider,
        settings,
        tools,
        reads,
        budgets: budgets(args, command.budget, settings_pricing)?,
        context_policy,
        mcp_servers: command.mcp_servers.clone(),
        sinks: sinks(args, command)?,
    })
}

/// The sinks `--sink` and the command file's `sinks:` name, and the OTLP traces when
/// `--otlp-endpoint` or the `OTEL_EXPORTER_OTLP_*` variables ask for them.
fn sinks(args: &RunCommandArgs, command: &CommandFile) -> anyhow::Result<Vec<SinkUri>> {
    let mut sinks = args
        .sinks
        .iter()
        .chain(&command.sinks)
        .map(|uri| SinkUri::parse(uri))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if let Some(traces) = Traces::from_env_or(args.otlp_endpoint.as_deref())? {
        sinks.push(SinkUri::Traces(traces));
    }
    Ok(sinks)
}

/// The command file's budgets with the flags' run limits over them.
fn budgets(args: &RunCommandArgs, mut budgets: Budgets, priced: bool) -> anyhow::Result<Budgets> {
    let run = &mut budgets.run;
    run.max_model_calls = args.max_model_calls.or(run.max_model_calls);
    run.max_input_tokens = args.max_input_tokens.or(run.max_input_tokens);
    run.max_output_tokens = args.max_output_tokens.or(run.max_output_tokens);
    run.max_cost_usd = args.max_cost_usd.or(run.max_cost_usd);
    for (scope, budget) in [("run", &budgets.run), ("session", &budgets.session)] {
        check_budget(scope, budget)?;
        if budget.max_cost_usd.is_some() && !priced {
            bail!(
                "budget.{scope}.max_cost_usd needs the prices to count with: add provider.pricing \
                 (input_per_mtok, output_per_mtok) to the command file"
            );
        }
    }
    Ok(budgets)
}

fn check_budget(scope: &str, budget: &Budget) -> anyhow::Result<()> {
    let zero = [
        ("max_model_calls", budget.max_model_calls == Some(0)),
        ("max_input_tokens", budget.max_input_tokens == Some(0)),
        ("max_output_tokens", budget.max_output_tokens == Some(0)),
    ];
    if let Some((limit, _)) = zero.iter().find(|(_, zero)| *zero) {
        bail!(
            "budget.{scope}.{limit} is 0: no model call could be made (leave it out for no limit)"
        );
    }
    if let Some(cost) = budget.max_cost_usd
        && !(cost.is_finite() && cost > 0.0)
    {
        bail!("budget.{scope}.max_cost_usd is {cost}; it must be a positive number of US dollars");
    }
    Ok(())
}
