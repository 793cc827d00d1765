(class_declaration
  name: (identifier) @name.definition.class
  body: (class_body) @body) @definition.class

(function_declaration
  name: (identifier) @name.definition.function
  body: (statement_block) @body) @definition.function

(generator_function_declaration
  name: (identifier) @name.definition.function
  body: (statement_block) @body) @definition.function

(method_definition
  name: (property_identifier) @name.definition.method
  body: (statement_block) @body) @definition.method

(lexical_declaration
  (variable_declarator
    name: (identifier) @name.definition.function
    value: [(arrow_function body: (_) @body) (function_expression body: (_) @body)])) @definition.function

(variable_declaration
  (variable_declarator
    name: (identifier) @name.definition.function
    value: [(arrow_function body: (_) @body) (function_expression body: (_) @body)])) @definition.function
