//! Label selectors between the Kubernetes form (`matchLabels`, `matchExpressions`) and the
//! core's, checked field by field.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use tideway_core::config::{LabelSelector as CoreSelector, SelectorOp, SelectorRequirement};

use crate::error::{ConvertError, Ctx};

/// The selector object that converts to `sel` (`None` for the empty selector).
pub(crate) fn selector_object(sel: &CoreSelector) -> Option<LabelSelector> {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    (!sel.match_labels.is_empty() || !sel.match_expressions.is_empty()).then(|| LabelSelector {
        match_labels: (!sel.match_labels.is_empty()).then(|| sel.match_labels.clone()),
        match_expressions: (!sel.match_expressions.is_empty()).then(|| {
            sel.match_expressions
                .iter()
                .map(|e| LabelSelectorRequirement {
                    key: e.key.clone(),
                    operator: match e.op {
                        SelectorOp::In => "In",
                        SelectorOp::NotIn => "NotIn",
                        SelectorOp::Exists => "Exists",
                        SelectorOp::DoesNotExist => "DoesNotExist",
                    }
                    .into(),
                    values: (!e.values.is_empty()).then(|| e.values.clone()),
                })
                .collect()
        }),
    })
}

/// Converts a Kubernetes label selector at `field`; an unknown operator names itself.
pub(crate) fn selector(
    cx: &Ctx,
    field: &str,
    sel: Option<&LabelSelector>,
) -> Result<CoreSelector, ConvertError> {
    let Some(sel) = sel else {
        return Ok(CoreSelector::default());
    };
    let mut out = CoreSelector {
        match_labels: sel.match_labels.clone().unwrap_or_default(),
        match_expressions: vec![],
    };
    let expressions = sel.match_expressions.as_deref().unwrap_or_default();
    crate::validation::max_items(
        cx,
        &format!("{field}.matchExpressions"),
        expressions,
        crate::validation::MAX_SELECTOR_TERMS,
    )?;
    for (i, e) in expressions.iter().enumerate() {
        let op = match e.operator.as_str() {
            "In" => SelectorOp::In,
            "NotIn" => SelectorOp::NotIn,
            "Exists" => SelectorOp::Exists,
            "DoesNotExist" => SelectorOp::DoesNotExist,
            other => {
                return Err(cx.err(
                    format!("{field}.matchExpressions[{i}].operator"),
                    format!("unknown operator {other:?}"),
                ));
            }
        };
        out.match_expressions.push(SelectorRequirement {
            key: e.key.clone(),
            op,
            values: e.values.clone().unwrap_or_default(),
        });
    }
    Ok(out)
}
